"""The known torch bugs the Join property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs.predicates import SEEN_ON, every_problem, example_of, shows
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom
from fuzzdist.properties.join import JoinCase


def _is_join_zero_joined_shard_stale(example: Mapping[str, Any], failure: BaseException) -> bool:
    """DDP with ZeRO under Join, and every problem on every rank is a parameter that the check found
    equal to the joined owner's shard stepped with that rank's own (stale or absent) gradients."""
    case = example_of(example, "case", JoinCase)
    return case is not None and case.zero and every_problem(failure, shows(Symptom.STALE_SHARD))


register(KnownBug(
    id="join-zero-joined-shard-stale", kind="wrong result",
    summary="Join([ddp, zero_optim]), the pattern Join's docstring shows: a joined rank's ZeroRedundancyOptimizer "
            "shard is stepped with that rank's own gradients (none after zero_grad()), not the active ranks' "
            "all-reduced ones (DDP's join hook discards them), so those parameters go wrong on every rank",
    where=("join",), recognise=_is_join_zero_joined_shard_stale, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/pull/60757",
    reproducer="docs/findings/join-zero-joined-shard-stale.py"))
