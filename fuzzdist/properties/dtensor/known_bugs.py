"""The known torch bugs the DTensor round-trip property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs.predicates import every_rank_raised, example_of
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.properties.dtensor import RoundTrip


def _has_empty_local_shard(case: RoundTrip | None) -> bool:
    """Whether some rank's local shard of the DTensor round trip is empty at some stage: the tensor has an
    empty dim, or a stage shards a dim over a mesh dim of more ranks than the dim has elements."""
    if case is None:
        return False
    shape, mesh_shape = tuple(case.spec.shape), case.mesh_shape
    if 0 in shape:
        return True
    stages = (tuple(case.placements),) + tuple(case.redistributions)
    return any(
        name != "R" and shape[int(name[1:]) % len(shape)] < mesh_shape[m]
        for stage in stages
        for m, name in enumerate(stage)
        if shape
    )


def _is_dtensor_empty_dim_negative_padding(example: Mapping[str, Any], failure: BaseException) -> bool:
    """torch 2.6.0: some rank's local shard is empty at some stage, and every failed rank raised pad_tensor's
    "negative padding" RuntimeError (the DTensor property's round trip); ranks whose shard is not empty
    may go on into the all-gather the failed ones never join, so stragglers are allowed."""
    if not _has_empty_local_shard(example_of(example, "case", RoundTrip)):
        return False
    return every_rank_raised(failure, RuntimeError, "negative padding", "pad_tensor")


register(
    KnownBug(
        id="dtensor-empty-shard-full-tensor-pads-negative",
        where=("dtensor",),
        recognise=_is_dtensor_empty_dim_negative_padding,
    )
)
