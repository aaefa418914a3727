"""The known torch bugs the functional-collectives property runs into (its gloo kernels' are check-pg's:
``fuzzdist.conformance.known_bugs``).

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.errors import RankError
from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import example_of
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.properties.functional import FunctionalCase


def _functional_all_to_all_complex(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every rank raised "Invalid scalar type" from a call that is an all_to_all_single of a complex tensor
    (the property's ranks name the call in the error's record), and none was left waiting."""
    case = example_of(example, "case", FunctionalCase)
    calls = () if case is None else case.calls
    errors = evidence.raised(failure)
    if not errors or evidence.waiting(failure) or not isinstance(failure, RankError):
        return False
    for problem in errors:
        if problem.call is None or problem.call >= len(calls) or not evidence.says(problem, "Invalid scalar type"):
            return False
        call = calls[problem.call]
        if call.op != "all_to_all_single" or problem.op != call.op or not call.spec.dtype.is_complex:
            return False
    return len(errors) == len(failure.ranks)


register(
    KnownBug(
        id="gloo-functional-all-to-all-complex-raises", where=("functional",), recognise=_functional_all_to_all_complex
    )
)
