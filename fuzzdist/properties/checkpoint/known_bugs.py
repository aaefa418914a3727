"""The known torch bugs the distributed-checkpoint properties run into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import example_of, raised_saying
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.properties.checkpoint import CheckpointCase, DTensorLeaf


def _piece_2_6(size: int, pieces: int, index: int) -> tuple[int, int]:
    """(length, offset) of piece ``index`` of a dim of ``size`` split in ``pieces``, as torch 2.6.0's
    ``Shard._local_shard_size_on_dim`` gives it (``torch.chunk``'s lengths; an empty piece's offset is the end
    of the dim where its start would lie past the end, else its start)."""
    if size % pieces == 0:
        return size // pieces, size // pieces * index
    step = -(-size // pieces)
    start = step * index
    return (0, size) if size < start else (min(size, start + step) - start, start)


def _empty_piece_on_another(leaf: object) -> bool:
    """Whether a checkpoint leaf is a DTensor saved with one tensor dim sharded over both dims of a 2-D mesh
    (``("S0", "S0")``) where torch 2.6.0's ``compute_local_shape_and_global_offset`` puts a rank's empty piece
    at the offset of another rank's non-empty piece.  Its arithmetic, read in 2.6.0's source: the inner offset
    replaces the outer one where the outer is not larger, else is added to it (a (2,) tensor on a 2x2 mesh:
    the empty pieces of ranks 1 and 3 at offset 1, rank 2's element's).  Checked on 2.6.0: that layout's save
    fails; (1,), (3,), (5,), (6,), (7,) and a (2, 1) tensor's dim 1 on 2x2, (2,) on 1x4 and 4x1, (3,) on 1x4
    save."""
    if not isinstance(leaf, DTensorLeaf):
        return False
    spec, mesh, names = leaf.spec, leaf.save_mesh, leaf.save_placements
    if len(mesh) != 2 or len(names) != 2:
        return False
    shape = tuple(spec.shape)
    if not shape or names[0] == "R" or names[0] != names[1]:
        return False
    pieces = []
    outer_size = shape[int(names[0][1:]) % len(shape)]
    for i in range(mesh[0]):
        outer_length, outer_offset = _piece_2_6(outer_size, mesh[0], i)
        for j in range(mesh[1]):
            length, offset = _piece_2_6(outer_length, mesh[1], j)
            pieces.append((length, offset if outer_offset <= offset else outer_offset + offset))
    starts = {offset for length, offset in pieces if length}
    return any(not length and offset in starts for length, offset in pieces)


_PLAN_REFUSED = "Failed to validate global plan"


def _is_double_shard_save_plan_refused(example: Mapping[str, Any], failure: BaseException) -> bool:
    """torch 2.6.0: the saved state dict holds a DTensor sharded twice on one dim with an empty piece that 2.6.0
    puts where another rank's piece starts, and every rank raised DCP's CheckpointException from the save's
    planning, the coordinator's ValueError "Failed to validate global plan" (DCP sends the coordinator's
    failure to every rank, so none waits)."""
    case = example_of(example, "case", CheckpointCase)
    if case is None or not any(_empty_piece_on_another(leaf) for _, leaf in case.leaves()):
        return False
    errors = evidence.raised(failure)
    if not errors or evidence.waiting(failure):
        return False
    from torch.distributed.checkpoint.api import CheckpointException

    return all(raised_saying(p, CheckpointException, _PLAN_REFUSED, "_save_state_dict") for p in errors)


register(
    KnownBug(
        id="dcp-save-double-shard-empty-piece-fails",
        where=("checkpoint",),
        recognise=_is_double_shard_save_plan_refused,
    )
)
