"""The known torch bugs the subgroups property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fuzzdist.errors import RankTimeout
from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import every_problem, example_of, shows
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom
from fuzzdist.properties.subgroups import SubgroupCase, _make_groups, _run_op

# The predicates read the drawn case through its attributes and the hooks its classes define
# (``Group.unsorted_dims()``, ``ObjectCase.dtypes_received(rank, world)``): this module can't import the
# property modules, which import fuzzdist.known_bugs.

# What a rendezvous that read a destroyed group's stale keys looks like: a rank's error is gloo's, from
# building the new group ("Gloo connectFullMesh failed ...") or from its tcp transport in the first
# collective (the peer reset/closed the connection, a socket or recv timed out); or a rank hangs inside
# ProcessGroupGloo(...) (a RankTimeout's stack).
_STALE_RENDEZVOUS = (
    r"Gloo connectFullMesh failed|gloo/transport/tcp/\S+\] (Read error \S+ )?"
    r"(Connection (reset|closed) by peer|Socket Timeout|Timed out waiting \d+ms for recv operation)"
)
_BUILDING_GLOO_GROUP = "ProcessGroupGloo("
# where a rank left waiting by a peer that failed the rendezvous stands: in the property's group making or
# collectives
_IN_THE_EXAMPLE = (_make_groups.__name__, _run_op.__name__)


def _is_local_sync_recreate(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A locally synchronised group over ranks that an earlier example's (destroyed) locally synchronised
    group had (``local_sync_before``, kept by the subgroups check per pool), and every rank that failed
    failed to connect, lost its peer or timed out in gloo's transport, or hung building the group (its
    rendezvous read the stale keys)."""
    before = example.get("local_sync_before") or ()
    case = example_of(example, "case", SubgroupCase)
    groups = () if case is None else case.groups
    if not any(g.local_sync and tuple(sorted(g.ranks)) in before for g in groups):
        return False
    return _is_stale_rendezvous(failure)


def _is_stale_rendezvous(failure: BaseException) -> bool:
    """Every rank that failed shows a stale rendezvous's symptom; a rank left waiting for it waits in
    this example's groups or collectives."""
    waiting = evidence.waiting(failure)
    if isinstance(failure, RankTimeout):
        return bool(waiting) and all(evidence.says(p, _BUILDING_GLOO_GROUP) for p in waiting)
    errors = evidence.raised(failure)
    return (
        bool(errors)
        and all(evidence.says_pattern(p, _STALE_RENDEZVOUS) for p in errors)
        and all(any(evidence.says(p, where) for where in _IN_THE_EXAMPLE) for p in waiting)
    )


LOCAL_SYNC_RECREATE = register(
    KnownBug(id="new-group-local-sync-recreate-fails", where=("subgroups",), recognise=_is_local_sync_recreate)
)


def _is_mesh_order(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The example has a mesh dimension whose drawn ranks are not ascending, and every problem is exactly what
    the ascending order gives (:attr:`Symptom.MESH_SORTED_ORDER`, which the rank sets only on such a
    dimension): its local rank, or an all_gather's outputs (all_reduce and broadcast don't depend on the
    order, so a wrong one is never this bug)."""
    case = example_of(example, "case", SubgroupCase)
    groups = () if case is None else case.groups
    unsorted = {(g.ranks, dim) for g in groups if g.kind == "mesh" for dim in g.unsorted_dims()}
    return bool(unsorted) and every_problem(failure, shows(Symptom.MESH_SORTED_ORDER))


MESH_LOCAL_RANK = register(
    KnownBug(id="device-mesh-local-rank-not-coordinate", where=("subgroups",), recognise=_is_mesh_order)
)


# gloo's rendezvous failing because a peer closed its side: the peer destroyed the group (dropped it)
# while this rank was still connecting
_PEER_CLOSED_MID_CONNECT = r"Gloo connectFullMesh failed.*Connection (closed|reset) by peer"


def _is_destroyed_early(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every collective of the example moves no data (zero-size tensors: nothing makes a peer wait for
    this rank after its ``new_group`` returned, so it can finish the example and destroy the group), every
    rank that failed raised gloo's "connectFullMesh failed ... Connection closed by peer" while making
    the example's groups, and a rank left waiting waits in a later group's making (for the failed rank)."""
    case = example_of(example, "case", SubgroupCase)
    if case is None or math.prod(case.spec.shape) != 0:
        return False
    errors = evidence.raised(failure)
    return (
        bool(errors)
        and all(
            evidence.says_pattern(p, _PEER_CLOSED_MID_CONNECT) and evidence.says(p, _make_groups.__name__)
            for p in errors
        )
        and all(evidence.says(p, _make_groups.__name__) for p in evidence.waiting(failure))
    )


DESTROYED_EARLY = register(
    KnownBug(id="gloo-new-group-destroyed-early-breaks-peer", where=("subgroups",), recognise=_is_destroyed_early)
)


# faulthandler's line (no comma before "in", unlike a traceback's) for a frame of the subgroups property's
# _retire, which drops the groups of an earlier example
_IN_RETIRE = r"subgroups(/__init__)?\.py\", line \d+ in _retire"


def _is_group_drop_deadlock(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The ranks timed out with a rank frozen while dropping process groups: its stack is faulthandler's (it
    answered no snapshot: none of its Python threads ran), in the subgroups property's ``_retire``."""
    return isinstance(failure, RankTimeout) and any(
        evidence.says_pattern(p, _IN_RETIRE) for p in evidence.waiting(failure)
    )


register(KnownBug(id="gloo-process-group-drop-deadlocks", where=("subgroups",), recognise=_is_group_drop_deadlock))
