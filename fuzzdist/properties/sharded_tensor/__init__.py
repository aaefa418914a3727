"""ShardedTensor with ``ChunkShardingSpec``: sharding a tensor and gathering it back keeps its values,
and each rank holds the ``torch.chunk`` piece its placement names, at the offsets its metadata states.

On CPU ranks over gloo, for a drawn full tensor (shape up to 3 dims of at most 64 elements per dim,
a dtype gloo's gather moves), a drawn sharding dim (negative dims included) and the placements
``rank:i/cpu`` in a drawn order, one per rank:

* ``ChunkShardingSpec(dim, placements).shard(tensor, src_rank=src, process_group=group)`` gives
  every rank exactly one local shard, whose metadata names that rank; the shard of placement ``i``
  is ``torch.chunk``'s piece ``i`` ("The semantics of how a tensor is partitioned is inline with
  :meth:`torch.chunk`, where ``dim`` in torch.chunk corresponds to the specified ``dim`` and
  ``chunks`` in torch.chunk is the number of elements in the placement specified"), bitwise, and
  its ``shard_offsets``/``shard_sizes`` are where that piece starts and how big it is.  Where
  ``torch.chunk`` returns fewer pieces than placements, the missing pieces are empty: only their
  size (0 along ``dim``) is checked, not the offset, which the docs leave open (on torch 2.13 the
  source rank's ``shard`` raises there instead where ``ceil(size / n) * (n - 1) > size``: the known bug
  ``sharded-tensor-chunk-offsets-past-end``; never at 2 ranks, first at 3).  Non-source ranks
  hand ``shard`` a decoy tensor that must show up nowhere ("``src_rank`` denotes the source rank
  which would be used as the ground truth of the data");
* ``gather(dst=d, out=...)`` ("Creates a full Tensor on rank ``dst`` by gathering all shards")
  writes the original into ``out`` on ``dst``, bitwise;
* with ``checkpoint`` drawn, ``{"t": sharded_tensor}`` saved with ``torch.distributed.checkpoint``
  and loaded into a ShardedTensor of the same shape sharded with placements in another drawn order
  gives every rank its new piece, bitwise (DCP: "When loading ShardedTensor or DTensor instances,
  each rank only reads data for their local shards").

Deprecated: torch 2.13 marks ShardedTensor's ``reshard``, ``_init_from_local_tensor`` and
``__torch_function__`` with ``@deprecated("Please use DTensor instead and we are deprecating
ShardedTensor.", category=FutureWarning)``, and ``torch.distributed._shard.checkpoint`` says it
"will be deprecated".  The property keeps testing it while it runs; the FutureWarnings are
expected and silenced here.

Not drawn: fewer placements than ranks or two placements on one rank (``shard`` scatters one piece
to each rank of the group and raises a bare AssertionError on a rank without a placement),
``process_group=None`` (``ChunkShardingSpec.shard`` documents it - "If ``process_group`` is None,
``src_rank`` is a global rank" - but raises "Group None is not registered" on torch 2.13: the
property passes the pool's group), non-contiguous inputs (``_shard_tensor`` refuses them).

Known: ``sharded-tensor-gather-default-dtype-float32`` (``gather`` without ``dtype`` gathers
through buffers of torch's default dtype, float32, so float64/int64/int32 values come back
rounded) and ``sharded-tensor-chunk-offsets-past-end`` (above); on torch 2.6.0
``sharded-tensor-empty-shards-overlap`` and ``sharded-tensor-gather-empty-shard-skips-collective``:
``gather`` on a rank whose local shard is empty returns without joining the gather collective, and
the other ranks wait in theirs.  A rank sees that from its group's collective count (where torch
keeps one) and joins the gather itself with a stand-in, so that the example ends with the problem
reported instead of a pool timeout, and the pool's group stays in step for the next example.  Generalises torch's
``ShardedTensorTestBase`` tests (4 ranks, fixed tensors) to drawn tensors, dims, placement orders,
sources and destinations.  The implementations under test are keywords: ``check(pool, case,
shard=..., gather=...)``.

Modules: ``known_bugs.py``, the torch bugs this family meets (listed in :mod:`fuzzdist.known_bugs.entries`).
"""

from __future__ import annotations

import math
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument, InvalidStrategyArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem, Symptom
from fuzzdist.properties import checkpoint
from fuzzdist.properties._results import fail_on_ranks_with_problems
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import first_difference

try:
    from torch.distributed._shard.sharded_tensor import ShardedTensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
except ImportError as exc:  # pragma: no cover - a torch without ShardedTensor
    raise ImportError(f"torch {torch.__version__} has no ShardedTensor/ChunkShardingSpec") from exc

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

SEEDS = seeds()
# dtypes gloo's gather moves on CPU (the gather in ShardedTensor.gather), in shrink order
DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
)
MAX_DIM = 64


@dataclass(frozen=True)
class ShardCase:
    """One example: the full tensor ``spec``/``seed`` (contiguous), sharded on ``dim`` over
    ``placements`` (the ranks, in placement order) from ``src``, gathered to ``dst``; with
    ``load_placements``, also saved through DCP and loaded into that other order."""

    spec: fst.TensorSpec
    seed: int
    dim: int
    placements: tuple[int, ...]
    src: int = 0
    dst: int = 0
    load_placements: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.spec, fst.TensorSpec):
            raise InvalidArgument(f"spec must be a fuzzdist.strategies.TensorSpec, got {type(self.spec).__name__}")
        if self.spec.ndim < 1:
            raise InvalidArgument("spec must have at least one dim to shard on")
        object.__setattr__(self, "placements", tuple(int(r) for r in self.placements))
        ranks = tuple(range(len(self.placements)))
        if tuple(sorted(self.placements)) != ranks:
            raise InvalidArgument(
                f"placements must name every rank once (one placement per rank), got {self.placements}"
            )
        if self.load_placements is not None:
            object.__setattr__(self, "load_placements", tuple(int(r) for r in self.load_placements))
            if tuple(sorted(self.load_placements)) != ranks:
                raise InvalidArgument(f"load_placements must name every rank once, got {self.load_placements}")
        if not -self.spec.ndim <= self.dim < self.spec.ndim:
            raise InvalidArgument(f"dim {self.dim} is out of range for a {self.spec.ndim}-dim tensor")
        for name in ("src", "dst"):
            if not 0 <= getattr(self, name) < len(ranks):
                raise InvalidArgument(f"{name} must be a rank in 0..{len(ranks) - 1}, got {getattr(self, name)}")


def _spec(dim: int, ranks: tuple[int, ...]) -> ChunkShardingSpec:
    return ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in ranks])


def chunk_span(size: int, chunks: int, index: int) -> tuple[int, int]:
    """(start, length) of ``torch.chunk``'s piece ``index`` of ``size`` elements in ``chunks``
    pieces; (size, 0) where torch.chunk returns fewer pieces."""
    split = -(-size // chunks) if chunks else 0
    start = min(index * split, size)
    return start, max(0, min(split, size - start))


def spec_shard(tensor: torch.Tensor, spec: ChunkShardingSpec, src_rank: int, group: Any) -> ShardedTensor:
    """torch's own: ``spec.shard(tensor, src_rank=..., process_group=group)``."""
    return spec.shard(tensor, src_rank=src_rank, process_group=group)


def st_gather(sharded: ShardedTensor, dst: int, out: torch.Tensor | None) -> None:
    """torch's own: ``sharded.gather(dst=dst, out=out)``."""
    sharded.gather(dst=dst, out=out)


def _collectives_issued(group: Any) -> int | None:
    """How many collectives this rank has issued on ``group`` (its sequence number), or None where the
    installed torch can't say (``_get_sequence_number_for_group``, private, is what c10d's own
    consistency checks read)."""
    get = getattr(group, "_get_sequence_number_for_group", None)
    if get is None:
        return None
    try:
        return int(get())
    except Exception:  # noqa: BLE001 - a group that doesn't count: no skip can be seen
        return None


def _skipped_gather(sharded: Any, dst: int, group: Any, rank: int) -> Problem:
    """This rank's ``gather`` returned without issuing the gather collective (torch 2.6.0 returns early on
    a rank whose local shard is empty), so the other ranks wait in theirs: join it with a stand-in, so
    that they finish and the pool's group stays in step, and return the problem.

    The stand-in moves no more bytes than each rank's piece of the real gather holds (gloo takes a
    message shorter than the buffer it lands in): uint8 elements, as many as the largest rank's piece
    has, sent from a non-destination rank; on the destination, buffers of 16 bytes an element (no dtype
    is wider) for the pieces the others send.  ``out`` on the destination is then left as it was."""
    sizes: dict[int, int] = {}
    for md in sharded.metadata().shards_metadata:
        sizes[md.placement.rank()] = sizes.get(md.placement.rank(), 0) + math.prod(md.shard_sizes)
    largest = max(sizes.values(), default=0)
    if largest:  # else the real gather moves no bytes and waits for no one
        if rank == dst:
            mine = torch.zeros(largest * 16, dtype=torch.uint8)
            pieces = [torch.zeros_like(mine) for _ in range(torch.distributed.get_world_size(group))]
            torch.distributed.gather(mine, pieces, dst=dst, group=group)
        else:
            torch.distributed.gather(torch.zeros(largest, dtype=torch.uint8), None, dst=dst, group=group)
    shapes = [tuple(s.tensor.shape) for s in sharded.local_shards()]
    empty = " (empty)" if any(0 in shape for shape in shapes) else ""
    return Problem(
        Kind.HANG,
        f"gather to rank {dst}",
        rank=rank,
        subject=tuple(shapes),
        symptom=Symptom.GATHER_SKIPPED,
        detail=f"local shards {shapes}{empty}: the other ranks waited in theirs (fuzzdist joined it for "
        f"them{'; out was left as it was' if rank == dst else ''})",
    )


def _decoy(full: torch.Tensor) -> torch.Tensor:
    return checkpoint.decoy_of(full).contiguous()


def _same_up_to_nan_payloads(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, with any NaN equal to any NaN (a float32 round trip may change a NaN's payload)."""
    if not a.is_floating_point():
        return torch.equal(a, b)
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _check_local(
    sharded: Any, full: torch.Tensor, dim: int, ranks: tuple[int, ...], rank: int, stage: str
) -> list[Problem]:
    problems: list[Problem] = []
    shards = sharded.local_shards()
    if len(shards) != 1:
        return [Problem(Kind.MISMATCH, f"{stage}: local shards", got=len(shards), expected=1)]
    shard = shards[0]
    index = ranks.index(rank)
    start, length = chunk_span(full.shape[dim], len(ranks), index)
    expected = full.narrow(dim, start, length)
    md = shard.metadata
    if md.placement is not None and md.placement.rank() != rank:
        problems.append(
            Problem(
                Kind.MISMATCH, f"{stage}: the local shard's metadata's rank", got=md.placement.rank(), expected=rank
            )
        )
    if tuple(md.shard_sizes) != tuple(expected.shape):
        problems.append(
            Problem(Kind.SHAPE, f"{stage}: shard_sizes", got=tuple(md.shard_sizes), expected=tuple(expected.shape))
        )
    elif length:
        offsets = tuple(start if d == dim else 0 for d in range(full.ndim))
        if tuple(md.shard_offsets) != offsets:
            problems.append(
                Problem(Kind.MISMATCH, f"{stage}: shard_offsets", got=tuple(md.shard_offsets), expected=offsets)
            )
    diff = first_difference(shard.tensor, expected, f"{stage}: local shard (placement {index})")
    if diff is not None:
        problems.append(diff)
    return problems


def shard_and_gather(
    ctx: RankContext,
    case: ShardCase,
    path: str | None = None,
    shard: Callable[..., Any] = spec_shard,
    gather: Callable[..., Any] = st_gather,
) -> list[Problem] | None:
    """On every rank: shard, check the local shard, gather to ``case.dst`` and check there; with
    ``path``, save through DCP and load into ``case.load_placements``.  None if all is well."""
    full = case.spec.materialize(ctx.device, case.seed)  # the reference: never handed to shard()
    given = full.clone() if ctx.rank == case.src else _decoy(full)
    dim = case.dim % full.ndim
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # ShardedTensor is deprecated (module docstring)
        warnings.simplefilter("ignore", UserWarning)  # "Gathering a tensor with zero elements"
        sharded = shard(given, _spec(case.dim, case.placements), case.src, ctx.group)
        problems = _check_local(sharded, full, dim, case.placements, ctx.rank, "shard")
        out = _decoy(full) if ctx.rank == case.dst else None
        issued = _collectives_issued(ctx.group)
        gather(sharded, case.dst, out)
        skipped = issued is not None and _collectives_issued(ctx.group) == issued
        if skipped:
            problems.append(_skipped_gather(sharded, case.dst, ctx.group, ctx.rank))
        elif out is not None:
            diff = first_difference(out, full, f"gather to rank {case.dst}")
            if diff is not None:
                rounded = full.to(torch.float32).to(full.dtype)
                if _same_up_to_nan_payloads(out, rounded):
                    diff = diff.with_symptom(Symptom.FLOAT32_ROUND_TRIP)
                problems.append(diff)
        if path is not None and case.load_placements is not None:
            checkpoint.dcp_save({"t": sharded}, path, False)
            target = shard(_decoy(full), _spec(case.dim, case.load_placements), case.src, ctx.group)
            checkpoint.dcp_load({"t": target}, path, False)
            problems += _check_local(target, full, dim, case.load_placements, ctx.rank, "checkpoint load")
    return problems or None


@st.composite
def shard_cases(
    draw: st.DrawFn,
    world_size: int,
    dtypes: st.SearchStrategy[torch.dtype] | None = None,
) -> ShardCase:
    """A ``ShardCase`` for ``world_size`` ranks: a contiguous tensor of 1 to 3 dims of at most
    ``MAX_DIM`` elements each (empty dims included), a dtype of ``DTYPES``, any dim (negative too),
    the ranks in any order, any source and destination, and (half the time) a DCP round trip into
    another order.  Shrinks to a (1,) float32 tensor on dim 0, placements in rank order, source and
    destination 0, no checkpoint."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InvalidStrategyArgument(f"world_size must be an int >= 1, got {world_size!r}")
    dtypes = st.sampled_from(DTYPES) if dtypes is None else dtypes
    shapes = (
        st.lists(st.integers(0, MAX_DIM), min_size=1, max_size=3)
        .map(tuple)
        .filter(lambda s: int(torch.tensor(s).prod()) <= 256)
    )
    spec = draw(fst.tensor_specs(shapes=shapes, dtypes=dtypes, layouts="contiguous"), label="spec")
    seed = draw(SEEDS, label="seed")
    dim = draw(st.integers(0, spec.ndim - 1) | st.integers(-spec.ndim, -1), label="dim")
    ranks = tuple(range(world_size))
    placements = tuple(draw(st.permutations(ranks), label="placements"))
    src = draw(st.integers(0, world_size - 1), label="src")
    dst = draw(st.integers(0, world_size - 1), label="dst")
    load = draw(st.none() | st.permutations(ranks).map(tuple), label="load_placements")
    return ShardCase(spec, seed, dim, placements, src, dst, load)


def check(
    pool: Pool,
    case: ShardCase,
    *,
    shard: Callable[..., Any] = spec_shard,
    gather: Callable[..., Any] = st_gather,
    base_dir: str | None = None,
) -> None:
    """Shard ``case``'s tensor over ``pool`` with ``shard`` and gather it with ``gather`` (and, with
    ``case.load_placements``, round-trip it through DCP in a fresh directory under ``base_dir``,
    removed afterwards); raise :class:`PropertyFailure` if any rank holds other values or metadata
    than ``torch.chunk``'s pieces say, or the gathered tensor is not the original.  Arguments that
    can't describe a run raise :class:`~fuzzdist.errors.InvalidArgument` before any rank runs."""
    if not isinstance(case, ShardCase):
        raise InvalidArgument(f"case must be a ShardCase (draw one with shard_cases), got {type(case).__name__}")
    for name, fn in (("shard", shard), ("gather", gather)):
        if not callable(fn):
            raise InvalidArgument(f"{name} must be a top-level function (importable on the ranks), got {fn!r}")
    if len(case.placements) != pool.world_size:
        raise InvalidArgument(
            f"the case has {len(case.placements)} placements for a pool of {pool.world_size} "
            f"ranks: draw it with shard_cases({pool.world_size})"
        )
    with known_failures("sharded_tensor", case=case):
        path = checkpoint.new_checkpoint_dir(base_dir) if case.load_placements is not None else None
        try:
            results = pool.run(shard_and_gather, case, path, shard=shard, gather=gather)
        finally:
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
        fail_on_ranks_with_problems(results, "saw other values than torch.chunk's pieces")
