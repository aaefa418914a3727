"""Sharded round trips: a tensor distributed as a DTensor with any Shard/Replicate placements on a
1-D or 2-D device mesh, and redistributed between any placements, keeps its values bitwise: every
rank's local shard is its ``torch.chunk`` piece and ``full_tensor()`` is the original.

On CPU ranks over gloo, world sizes 2 and 4, every mesh shape that factors the world size
((W,), (a, b) with a * b = W, size-1 mesh dims included), every dtype gloo moves, any shape
(0-d and empty included) and layout, and uneven shards (a dim not divisible by the mesh size,
ranks with empty shards).  Every stage is checked: after ``distribute_tensor`` and after each
``redistribute``, the DTensor's shape and placements, each rank's ``to_local()`` against the
shard cut from the original with ``torch.chunk`` semantics (mesh dim 0 first, then mesh dim 1
within that piece), and ``full_tensor()`` against the original, all bitwise (pure data movement).

``src_data_rank`` (where the installed torch has it) is drawn too: ``s`` means group rank ``s``
on every mesh dimension is the source of the data (the docstring's "group_rank=0 on each
DeviceMesh dimension" for the default), so the data comes from the rank at mesh coordinate
``(s, ..., s)``; every other rank is handed a decoy tensor, which must not show up anywhere.
``None`` means no communication: every rank holds the original and cuts its own shard.

Not checked: that ``distribute_tensor`` leaves its input alone.  With a Replicate placement it
broadcasts into the caller's tensor in place (``Replicate._make_replicate_tensor``: ``tensor =
tensor.contiguous(); mesh_broadcast(tensor, ...)``), so non-source ranks' inputs are overwritten
with the source's data.  Partial placements are left out (a reduction, not data movement).

Generalises the set-up torch's sharded-tensor tests share (seed 004, ``ShardedTensorTestBase``:
a fixed world of 4 ranks and fixed inputs in each test) to drawn meshes, placements,
redistributions, dtypes, shapes and source ranks.  Importing this module raises ImportError where
torch has no DTensor API.

Modules: ``known_bugs.py``, the torch bugs this family meets (listed in :mod:`fuzzdist.known_bugs.entries`).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.pool.capabilities.gloo import gloo_dtypes
from fuzzdist.pool.rank.isolation import keep_process_groups
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties._results import fail_on_ranks_with_problems
from fuzzdist.strategies import TensorSpec, mesh_shapes, seeds
from fuzzdist.toolkit.checks import first_difference

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext


def _dtensor_api() -> Any:
    """The module holding the DTensor API: public since torch 2.4/2.5, private before."""
    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if all(hasattr(module, attr) for attr in ("DTensor", "distribute_tensor", "Shard", "Replicate")):
            return module
    return None


API = _dtensor_api()
if API is None:
    raise ImportError(f"torch {torch.__version__} has no DTensor API (torch.distributed.tensor)")
try:
    from torch.distributed.device_mesh import init_device_mesh
except ImportError:  # pragma: no cover - torch < 2.2
    init_device_mesh = API.init_device_mesh

# src_data_rank: a keyword of distribute_tensor in newer torch; without it the source is rank 0.
HAS_SRC_DATA_RANK = "src_data_rank" in inspect.signature(API.distribute_tensor).parameters
MAX_BYTES = 2048
SEEDS = seeds()
_LOGGERS = ("torch.distributed.tensor", "torch.distributed._tensor")


@dataclass(frozen=True)
class RoundTrip:
    """One example.  Placements are strings: ``"R"`` (Replicate) or ``"S<d>"`` (Shard(d), d may be
    negative), one per mesh dimension.  ``redistributions`` are the placements redistributed to,
    in order.  ``src_data_rank`` is passed to ``distribute_tensor`` where torch has it."""

    spec: TensorSpec
    seed: int
    mesh_shape: tuple[int, ...]
    placements: tuple[str, ...]
    redistributions: tuple[tuple[str, ...], ...] = ()
    src_data_rank: int | None = 0


# ---------------------------------------------------------------------------
# on the ranks

# (device type, mesh shape) -> DeviceMesh, one per shape for the process's life
_MESHES: dict[tuple[str, tuple[int, ...]], DeviceMesh] = {}


def device_mesh(device_type: str, shape: tuple[int, ...]) -> DeviceMesh:
    """The DeviceMesh of ``shape`` over the pool's default group; a 2-D mesh creates sub-groups
    (a collective: every rank gets here in the same example), once per rank process."""
    key = (device_type, tuple(shape))
    if key not in _MESHES:
        with keep_process_groups():  # cached for the process's life: not destroyed after the example
            _MESHES[key] = init_device_mesh(device_type, tuple(shape))
    return _MESHES[key]


def placement(name: str) -> Any:
    """The DTensor placement a name stands for: ``"R"`` is Replicate, ``"S<d>"`` Shard(d)."""
    return API.Replicate() if name == "R" else API.Shard(int(name[1:]))


def _normalized(names: tuple[str, ...], ndim: int) -> tuple[Any, ...]:
    """The placements a DTensor reports: Shard dims made non-negative."""
    return tuple(API.Replicate() if n == "R" else API.Shard(int(n[1:]) % ndim) for n in names)


def expected_local(
    full: torch.Tensor, mesh_shape: tuple[int, ...], coord: tuple[int, ...], names: tuple[str, ...]
) -> torch.Tensor:
    """The shard of ``full`` at mesh coordinate ``coord``: torch.chunk semantics (ceil(size / n)
    per piece, the last ones shorter or empty), mesh dim 0 first, then within that piece.  Only the
    ``"S<d>"`` names split: a Replicate (``"R"``) or Partial name (the operator property's ``"P+"``, ...)
    keeps the whole of that mesh dim's piece."""
    t = full
    for mesh_dim, name in enumerate(names):
        if not name.startswith("S"):
            continue
        d = int(name[1:]) % full.ndim
        n, k, size = mesh_shape[mesh_dim], coord[mesh_dim], t.size(d)
        chunk = -(-size // n)
        start = min(k * chunk, size)
        t = t.narrow(d, start, min(start + chunk, size) - start)
    return t


def _distribute(tensor: torch.Tensor, mesh: DeviceMesh, placements: list[Any], **kwargs: Any) -> Any:
    return API.distribute_tensor(tensor, mesh, placements, **kwargs)


def _redistribute(dtensor: Any, mesh: DeviceMesh, placements: list[Any]) -> Any:
    return dtensor.redistribute(mesh, placements)


def _full_tensor(dtensor: Any) -> torch.Tensor:
    return dtensor.full_tensor()


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """DTensor logs a warning for each gloo all-to-all fallback and multi-step redistribution."""
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=False):
            lg.setLevel(level)


def _check_stage(
    stage: str,
    dt: Any,
    names: tuple[str, ...],
    original: torch.Tensor,
    mesh_shape: tuple[int, ...],
    coord: tuple[int, ...],
    full_tensor: Callable[..., Any],
) -> list[Problem]:
    problems = []
    if tuple(dt.shape) != tuple(original.shape):
        problems.append(
            Problem(Kind.SHAPE, f"{stage}: DTensor shape", got=tuple(dt.shape), expected=tuple(original.shape))
        )
    expected_placements = _normalized(names, original.ndim)
    if tuple(dt.placements) != expected_placements:
        problems.append(
            Problem(Kind.SHAPE, f"{stage}: placements", got=tuple(dt.placements), expected=expected_placements)
        )
    local = dt.to_local()
    if tuple(original.shape) == tuple(dt.shape):
        diff = first_difference(
            local,
            expected_local(original, mesh_shape, coord, names),
            f"{stage}: local shard at mesh coordinate {coord}",
        )
        if diff is not None:
            problems.append(diff)
    full = full_tensor(dt)  # a collective: every rank calls it, whatever it found so far
    diff = first_difference(full, original, f"{stage}: full_tensor()")
    if diff is not None:
        problems.append(diff)
    return problems


def roundtrip_and_check(
    ctx: RankContext,
    case: RoundTrip,
    distribute: Callable[..., Any] = _distribute,
    redistribute: Callable[..., Any] = _redistribute,
    full_tensor: Callable[..., Any] = _full_tensor,
) -> list[Problem] | None:
    """On every rank: distribute, then redistribute along case.redistributions, checking each
    stage; None if all is well, else the problems.  The three operations are swappable."""
    mesh = device_mesh(ctx.device.type, case.mesh_shape)
    coordinate = mesh.get_coordinate()
    assert coordinate is not None, "every rank of the pool is in the mesh"
    coord = tuple(coordinate)
    original = case.spec.materialize(ctx.device, case.seed)  # the reference: never handed to DTensor
    is_source = case.src_data_rank is None or all(c == case.src_data_rank for c in coord)
    # a fresh tensor (distribute_tensor may write into it); decoys on the non-source ranks
    given_tensor = case.spec.materialize(ctx.device, case.seed if is_source else case.seed + 2**33)
    kwargs = {"src_data_rank": case.src_data_rank} if HAS_SRC_DATA_RANK else {}
    try:
        with _quiet_logs():
            dt = distribute(given_tensor, mesh, [placement(n) for n in case.placements], **kwargs)
            problems = _check_stage(
                f"distribute_tensor to {case.placements}",
                dt,
                case.placements,
                original,
                case.mesh_shape,
                coord,
                full_tensor,
            )
            for i, names in enumerate(case.redistributions, 1):
                dt = redistribute(dt, mesh, [placement(n) for n in names])
                problems += _check_stage(
                    f"redistribute #{i} to {names}", dt, names, original, case.mesh_shape, coord, full_tensor
                )
    except BaseException:
        # A rank that raised between collectives has issued fewer of them than a peer that went on (torch
        # 2.6.0's dtensor-empty-shard-full-tensor-pads-negative: rank 0's zero-byte all-gather returns
        # at once, the others raise before theirs).  The mesh's groups outlive the example (the 1-D mesh's
        # is the pool's default group) and gloo pairs each collective by its count, so every later
        # collective on them would hang: fresh rank processes for the next example.
        ctx.request_recycle(
            "a rank raised part-way through the DTensor round trip: the mesh's process groups "
            "may have issued different numbers of collectives on different ranks"
        )
        raise
    return problems or None


# ---------------------------------------------------------------------------
# strategies


def placements_for(ndim: int, mesh_ndim: int) -> st.SearchStrategy[tuple[str, ...]]:
    """A placement per mesh dim: Replicate, or Shard of any dim (negative dims last)."""
    names = ["R"] + [f"S{d}" for d in range(ndim)] + [f"S{d - ndim}" for d in range(ndim)]
    return st.tuples(*[st.sampled_from(names)] * mesh_ndim)


@st.composite
def roundtrips(draw: st.DrawFn, world_size: int, dtypes: st.SearchStrategy[torch.dtype] | None = None) -> RoundTrip:
    """A RoundTrip; shrinks to a (1,) float32 tensor replicated on the 1-D mesh, then
    redistributed to Replicate, with src_data_rank 0."""
    mesh_shape = draw(st.sampled_from(mesh_shapes(world_size)), label="mesh_shape")
    # by default, what the installed torch's DTensor takes on gloo
    dtypes = st.sampled_from(gloo_dtypes("dtensor")) if dtypes is None else dtypes
    spec = draw(fst.tensor_specs(dtypes=dtypes, max_bytes=MAX_BYTES), label="spec")
    seed = draw(SEEDS, label="seed")
    strategy = placements_for(spec.ndim, len(mesh_shape))
    placements = draw(strategy, label="placements")
    redistributions = tuple(draw(st.lists(strategy, min_size=1, max_size=2), label="redistributions"))
    src: int | None = 0
    if HAS_SRC_DATA_RANK:  # group rank s on every mesh dim: s < the smallest mesh dim
        src = draw(st.one_of(st.integers(0, min(mesh_shape) - 1), st.none()), label="src_data_rank")
    return RoundTrip(spec, seed, mesh_shape, placements, redistributions, src)


# ---------------------------------------------------------------------------
# the driver-side check


def check(
    pool: Pool,
    case: RoundTrip,
    *,
    distribute: Callable[..., Any] = _distribute,
    redistribute: Callable[..., Any] = _redistribute,
    full_tensor: Callable[..., Any] = _full_tensor,
) -> None:
    """Distribute ``case``'s tensor over ``pool`` and redistribute it along ``case.redistributions``
    with ``distribute``/``redistribute``/``full_tensor`` (DTensor's own by default); raise
    :class:`PropertyFailure` if any rank lost or moved values at any stage."""
    with known_failures("dtensor", case=case):  # torch 2.6.0: dtensor-empty-shard-full-tensor-pads-negative
        results = pool.run(
            roundtrip_and_check, case, distribute=distribute, redistribute=redistribute, full_tensor=full_tensor
        )
        fail_on_ranks_with_problems(results, "lost or moved values")
