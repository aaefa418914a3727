"""The known torch bugs the Join property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs.predicates import every_problem, example_of, shows
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom
from fuzzdist.properties.join import JoinCase


def _is_join_zero_joined_shard_stale(example: Mapping[str, Any], failure: BaseException) -> bool:
    """DDP with ZeRO under Join, and every problem on every rank is a parameter that the check found
    equal to the joined owner's shard stepped with that rank's own (stale or absent) gradients."""
    case = example_of(example, "case", JoinCase)
    return case is not None and case.zero and every_problem(failure, shows(Symptom.STALE_SHARD))


register(KnownBug(id="join-zero-joined-shard-stale", where=("join",), recognise=_is_join_zero_joined_shard_stale))
