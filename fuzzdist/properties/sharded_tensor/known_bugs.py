"""The known torch bugs the sharded-tensor property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import every_problem, example_of, raised_saying, shows
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom
from fuzzdist.properties.sharded_tensor import ShardCase


def _is_sharded_tensor_gather_float32(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is the gather's result on its destination, which the check found to be exactly
    the original rounded to float32 and back (ShardedTensor.gather's default buffers are float32)."""
    return every_problem(failure, shows(Symptom.FLOAT32_ROUND_TRIP))


register(
    KnownBug(
        id="sharded-tensor-gather-default-dtype-float32",
        where=("sharded_tensor",),
        recognise=_is_sharded_tensor_gather_float32,
    )
)


def _is_chunk_offset_past_end(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The source rank's ``ChunkShardingSpec.shard`` raised narrow's "start out of range" IndexError
    (every other failed rank too), in a case whose chunk offsets run past the end of the sharded dim:
    ceil(size / n) * (n - 1) > size for n placements."""
    case = example_of(example, "case", ShardCase)
    errors = evidence.raised(failure)
    if case is None or not case.placements or not errors:
        return False
    size, n = case.spec.shape[case.dim % len(case.spec.shape)], len(case.placements)
    if not -(-size // n) * (n - 1) > size:
        return False
    return all(raised_saying(p, IndexError, "start out of range", "chunk_sharding_spec") for p in errors)


_EMPTY_SHARD = r"shard_sizes=\[(\d+, )*0(, \d+)*\]"  # torch's repr of a shard's metadata with a size 0
_EMPTY_SHARDS_OVERLAP = rf"Shards .*{_EMPTY_SHARD}.* and .*{_EMPTY_SHARD}.* overlap$"


def _is_empty_shards_overlap(example: Mapping[str, Any], failure: BaseException) -> bool:
    """torch 2.6.0: every failed rank raised ValueError "Shards ... and ... overlap" about two shards that are
    both empty (a size 0 in each), from the shard-metadata check ChunkShardingSpec.shard runs."""
    errors = evidence.raised(failure)
    if example_of(example, "case", ShardCase) is None or not errors:
        return False
    return all(
        raised_saying(p, ValueError, "chunk_sharding_spec") and evidence.says_pattern(p, _EMPTY_SHARDS_OVERLAP)
        for p in errors
    )


register(
    KnownBug(id="sharded-tensor-empty-shards-overlap", where=("sharded_tensor",), recognise=_is_empty_shards_overlap)
)


register(
    KnownBug(id="sharded-tensor-chunk-offsets-past-end", where=("sharded_tensor",), recognise=_is_chunk_offset_past_end)
)


def _is_gather_empty_shard_skip(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A rank whose local shard is empty returned from ``ShardedTensor.gather`` without joining the gather
    collective (the check saw its group's collective count unchanged, joined the gather for the waiting
    ranks and says so); every other problem is that too, or the float32 rounding of
    sharded-tensor-gather-default-dtype-float32 on the destination, which the same example can show."""
    problems = evidence.reported(failure)
    if not problems or not any(p.symptom is Symptom.GATHER_SKIPPED for p in problems):
        return False
    return all(
        (p.symptom is Symptom.GATHER_SKIPPED and any(0 in shape for shape in p.subject))
        or p.symptom is Symptom.FLOAT32_ROUND_TRIP
        for p in problems
    )


register(
    KnownBug(
        id="sharded-tensor-gather-empty-shard-skips-collective",
        where=("sharded_tensor",),
        recognise=_is_gather_empty_shard_skip,
    )
)
