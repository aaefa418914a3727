"""What known-bug predicates share: every problem showing a symptom, a rank's (or every rank's) exception of a type
saying torch's words, the layouts whose memory order differs, and the torch release the entries were last checked on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fuzzdist.known_bugs import evidence
from fuzzdist.problems import Problem, Symptom

__all__ = [
    "DENSE_NON_CONTIGUOUS",
    "SEEN_ON",
    "every_problem",
    "every_rank_raised",
    "example_of",
    "raised_saying",
    "shows",
]

T = TypeVar("T")

SEEN_ON = ("2.13",)
"""The torch release most entries reproduced on (``KnownBug.seen_on``)."""

DENSE_NON_CONTIGUOUS = ("transposed", "channels_last")
"""The drawn layouts whose memory order is not row-major (``fuzzdist.strategies.LAYOUTS``)."""


def every_problem(failure: BaseException, test: Callable[[Problem], bool]) -> bool:
    """Whether ``failure`` reported problems (a property's or check-pg's) and ``test`` holds for each."""
    problems = evidence.reported(failure) or []
    return bool(problems) and all(test(p) for p in problems)


def shows(symptom: Symptom) -> Callable[[Problem], bool]:
    """A test of a problem: it shows ``symptom``."""
    return lambda problem: problem.symptom is symptom


def raised_saying(problem: Problem, error: type[BaseException], *words: str) -> bool:
    """Whether ``problem`` is an exception of type ``error`` (or a subclass) that a rank raised, and its text
    says each of ``words`` (torch's own, read through :func:`~fuzzdist.known_bugs.evidence.says`)."""
    return evidence.raised_a(problem, error) and all(evidence.says(problem, w) for w in words)


def every_rank_raised(failure: BaseException, error: type[BaseException], *words: str) -> bool:
    """Whether some rank raised, and every rank that raised raised an ``error`` saying each of ``words``
    (:func:`raised_saying`); ranks that are waiting or died are not looked at."""
    errors = evidence.raised(failure)
    return bool(errors) and all(raised_saying(p, error, *words) for p in errors)


def example_of(example: Mapping[str, Any], key: str, cls: type[T]) -> T | None:
    """The example's ``key`` field where it is a ``cls`` (the family's own case or config class), else None:
    a predicate asks the example's type, not whether it has the right attributes."""
    value = example.get(key)
    return value if isinstance(value, cls) else None
