"""A failure as the :class:`~fuzzdist.problems.Problem` records known-bug predicates read.

fuzzdist's own failures carry their records (:attr:`PropertyFailure.problems`,
:attr:`ConformanceFailure.problems`): :func:`reported` hands them over.  What torch itself said when a
rank raised, died or hung (an exception's message, a traceback, a stack) is torch's text, which fuzzdist
can't turn into fields: :func:`raised`, :func:`waiting` and :func:`died` wrap it in a record each, and a
predicate reads that text only through :func:`says`, with words quoted from torch.  So predicates never
read a message fuzzdist wrote, and rewording one can't change what is reported as a known bug
(``tests/known_bugs/test_predicates_read_no_text.py`` checks the predicate modules).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from fuzzdist.errors import ConformanceFailure, PropertyFailure, RankCrash, RankError, RankTimeout
from fuzzdist.problems import Kind, Problem, flatten

__all__ = [
    "died",
    "ran_on_gloo",
    "raised",
    "raised_a",
    "reported",
    "reported_by_rank",
    "says",
    "says_pattern",
    "waiting",
]


def reported(failure: BaseException) -> list[Problem] | None:
    """The problems a property's ranks or a check-pg check reported; None for any other failure."""
    if isinstance(failure, (PropertyFailure, ConformanceFailure)):
        return failure.problems
    return None


def reported_by_rank(failure: BaseException) -> list[list[Problem]] | None:
    """Each rank's problems, in rank order, where a property's ranks reported them; None for any other
    failure."""
    if not isinstance(failure, PropertyFailure):
        return None
    return [flatten([result]) for result in failure.results]


def raised(failure: BaseException) -> list[Problem]:
    """One :attr:`~fuzzdist.problems.Kind.RAISED` record per rank that raised (a :class:`RankError`), in rank
    order: where the exception carries its own record (a property that names the call that raised), that
    record; else the exception's type names (``error_types``: the type raised on the rank, then the classes of
    the exception rebuilt in the driver, qualified), torch's message
    (``error_text``) and the rank's traceback (``trace``).  Empty for any other failure."""
    if not isinstance(failure, RankError):
        return []
    out = []
    for rank in sorted(failure.exceptions):
        exc = failure.exceptions[rank]
        own = getattr(exc, "problem", None)
        if isinstance(own, Problem):
            out.append(own)
            continue
        remote = failure.exc_types.get(rank)  # the type raised on the rank, where it could not be rebuilt
        out.append(
            Problem(
                Kind.RAISED,
                rank=rank,
                error=remote or type(exc).__qualname__,
                error_types=(*([remote] if remote else []), *_type_names(type(exc))),
                error_text=str(exc),
                trace=failure.tracebacks.get(rank, ""),
            )
        )
    return out


def waiting(failure: BaseException) -> list[Problem]:
    """One :attr:`~fuzzdist.problems.Kind.HANG` record per rank left waiting, with its stack (``trace``): the
    ranks of a :class:`RankTimeout`, the stragglers of a :class:`RankError`.  Empty for any other failure."""
    if isinstance(failure, RankTimeout):
        stacks, ranks = failure.stacks, failure.ranks
    elif isinstance(failure, RankError):
        stacks, ranks = failure.straggler_stacks, failure.stragglers
    else:
        return []
    diagnosis = failure.diagnosis
    return [
        Problem(
            Kind.HANG,
            rank=r,
            trace=stacks.get(r, "")
            if diagnosis is None
            else "\n".join(
                (diagnosis.summary, diagnosis.ranks.get(r, ""), diagnosis.details.get(r, ""), stacks.get(r, ""))
            ),
        )
        for r in ranks
    ]


def died(failure: BaseException) -> list[Problem]:
    """One :attr:`~fuzzdist.problems.Kind.RAISED` record per rank process that died (a :class:`RankCrash`):
    its cause ("SIGABRT", "exit code 3") as ``error``, its last output and its stack at the fatal signal as
    ``trace``.  Empty for any other failure."""
    if not isinstance(failure, RankCrash):
        return []
    return [
        Problem(
            Kind.RAISED,
            rank=r,
            error=failure.causes.get(r),
            trace=failure.last_output.get(r, "") + "\n" + failure.stacks.get(r, ""),
        )
        for r in failure.ranks
    ]


def ran_on_gloo(example: Mapping[str, Any]) -> bool:
    """Whether the example ran on gloo (its ``backend``, or a group that names itself after it)."""
    return "gloo" in str(example.get("backend") or "").lower()


def says(problem: Problem, words: str) -> bool:
    """Whether what torch said in ``problem`` (its exception's message, the traceback or stack) holds
    ``words``, quoted from torch's (or gloo's) own messages."""
    return says_pattern(problem, re.escape(words))


def says_pattern(problem: Problem, pattern: str) -> bool:
    """Whether what torch said in ``problem`` matches ``pattern``, a regular expression over torch's (or
    gloo's) own messages, where their words vary (a path, a size, one of a few phrasings)."""
    found = _pattern(pattern)
    return found.search(problem.error_text) is not None or found.search(problem.trace) is not None


def raised_a(problem: Problem, error: type[BaseException]) -> bool:
    """Whether ``problem`` is an exception of type ``error`` (or a subclass) that a rank raised."""
    return _qualified(error) in problem.error_types


@cache
def _pattern(words: str) -> re.Pattern[str]:
    return re.compile(words, re.S)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _type_names(cls: type) -> tuple[str, ...]:
    return tuple(_qualified(c) for c in cls.__mro__)
