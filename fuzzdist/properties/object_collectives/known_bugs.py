"""The known torch bugs the object-collectives property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import example_of
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Kind
from fuzzdist.properties.object_collectives import ObjectCase

# the dtypes torch can't unpickle
_WIDE = (
    "uint16",
    "uint32",
    "uint64",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
)
_UNPICKLE_ERROR = r"UntypedStorage' has no attribute 'dtype'|(float8|uint16|uint32|uint64).*(not supported|unpickl)"


def _is_wide_unsigned_unpickle(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is a rank's collective raising the unpickling error, on a rank that receives a
    tensor of a dtype torch 2.13 can't unpickle (uint16/32/64, float8)."""
    case = example_of(example, "case", ObjectCase)
    by_rank = evidence.reported_by_rank(failure)
    if case is None or not by_rank:
        return False
    received = case.dtypes_received
    world = len(by_rank)
    seen = False
    for rank, problems in enumerate(by_rank):
        for problem in problems:
            if not (
                problem.kind is Kind.RAISED
                and problem.op == case.op
                and evidence.says_pattern(problem, _UNPICKLE_ERROR)
            ):
                return False
            if not any(d in _WIDE for d in received(rank, world)):
                return False
            seen = True
    return seen


# the torch bug of docs/findings/wide-unsigned-unpickle.py, seen through the object collectives
WIDE_UNSIGNED_UNPICKLE = register(
    KnownBug(id="wide-unsigned-unpickle-objects", where=("object_collectives",), recognise=_is_wide_unsigned_unpickle)
)
