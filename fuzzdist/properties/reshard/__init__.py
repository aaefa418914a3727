"""Checkpoints across world sizes: what ``torch.distributed.checkpoint`` (DCP) saves from W ranks loads into
W' != W ranks, every value bitwise, and the conversions between DCP and ``torch.save`` keep every value.

Modules: this one (tensors and DTensors), ``model_state`` (a DDP, FSDP2 or FSDP1 model and its optimizer, saved
under one sharding and world size and loaded under another), ``known_bugs`` (the torch bugs these properties run
into).

A pool runs one world size per call, so the property uses sub-groups of it: the first W ranks save, over a
1-D ``DeviceMesh`` of those ranks and its process group (``dcp.save(..., process_group=...)``), and the first
W' ranks load, over a mesh and group of theirs; the other ranks wait at a barrier.  For each drawn case
(:func:`reshard_cases`), every entry a tensor of a drawn dtype and shape, rebuilt from its seed:

* ``conversion="none"``: the W ranks save a state dict of DTensors (each with a drawn Shard/Replicate
  placement on the save mesh; each rank's ``torch.chunk`` piece, built with ``DTensor.from_local``, no
  communication) and plain tensors (the same on every rank); the W' ranks load it into DTensors with
  other drawn placements on the load mesh and plain tensors, all pre-filled with a decoy that differs in
  every element.  Every loading rank's local piece, and every plain tensor, must equal the piece of the
  value rebuilt from the seed, bitwise, in the tensors the caller allocated.
* ``conversion="dcp_to_torch_save"``: as above, and rank 0 also converts the checkpoint with
  ``format_utils.dcp_to_torch_save`` and ``torch.load``\\ s the file: every value must be the whole tensor.
* ``conversion="torch_save_to_dcp"``: rank 0 ``torch.save``\\ s the whole tensors and converts the file
  with ``format_utils.torch_save_to_dcp``; the W' ranks load that into their drawn DTensors as above.

What the docs promise.  ``dcp.load``: "DCP supports load-time resharding ... Each rank will try to read the
least amount of data necessary to fulfill the requested `state_dict`. When loading ShardedTensor or DTensor
instances, each rank only reads data for their local shards", and "All tensors in ``state_dict`` must be
allocated on their destination device *prior to* calling this function" (hence the check on the caller's
tensors); ``process_group``: "ProcessGroup to be used for cross-rank synchronization" (save and load).
``get_state_dict`` (which the checkpoint family checks at one world size) promises state dicts "that can be
resharded with a different number of trainers".  ``dcp_to_torch_save``: "Given a directory containing a DCP
checkpoint, this function will convert it into a Torch save file"; ``torch_save_to_dcp``: "Given the location
of a torch save file, converts it into a DCP checkpoint".

Not drawn, and why: plain tensors that differ between ranks (DCP keeps one rank's copy of a plain tensor:
the docs don't say whose), 2-D meshes (the checkpoint family draws them at one world size), non-tensor
values (the checkpoint family's).  The implementations under test are keywords of :func:`check`, as in the
checkpoint family: ``save(state_dict, checkpoint_id, process_group)`` and ``load(state_dict,
checkpoint_id, process_group)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.pool.rank.isolation import keep_process_groups
from fuzzdist.problems import Problem
from fuzzdist.properties import dtensor
from fuzzdist.properties._results import fail_on_ranks_with_problems
from fuzzdist.properties.checkpoint import decoy_of, run_in_checkpoint_dir
from fuzzdist.toolkit.checks import first_difference, keyed_differences
from fuzzdist.toolkit.reporting import capped

try:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor
except ImportError as exc:  # pragma: no cover - torch without DCP's format_utils
    raise ImportError(f"torch {torch.__version__} has no torch.distributed.checkpoint.format_utils") from exc

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

__all__ = ["CONVERSIONS", "Entry", "ReshardCase", "check", "dcp_load", "dcp_save", "reshard", "reshard_cases"]

CONVERSIONS = ("none", "dcp_to_torch_save", "torch_save_to_dcp")
"""How the checkpoint is written and read, in shrink order (see the module docstring)."""
MAX_BYTES = 256  # per tensor: small and fast; shapes still reach dims shorter than the mesh (empty pieces)
MAX_ENTRIES = 4
PLAIN = "T"  # the placement name of a plain (replicated, non-DTensor) tensor


@dataclass(frozen=True)
class Entry:
    """One tensor of the state dict: the value ``spec``/``seed``, saved as ``save_placement`` (``"R"``,
    ``"S<d>"`` on the save mesh, or ``"T"``: a plain tensor) and loaded as ``load_placement``."""

    spec: fst.TensorSpec
    seed: int
    save_placement: str
    load_placement: str


@dataclass(frozen=True)
class ReshardCase:
    """The first ``save_ranks`` ranks save ``entries`` (under the keys ``e0``, ``e1``...), the first
    ``load_ranks`` load them; ``conversion`` one of :data:`CONVERSIONS`."""

    save_ranks: int
    load_ranks: int
    entries: tuple[Entry, ...]
    conversion: str = "none"

    def __post_init__(self) -> None:
        if self.save_ranks == self.load_ranks or min(self.save_ranks, self.load_ranks) < 1:
            raise InvalidArgument(
                f"save_ranks {self.save_ranks} and load_ranks {self.load_ranks} must be two "
                "different positive world sizes"
            )
        if self.conversion not in CONVERSIONS:
            raise InvalidArgument(f"conversion={self.conversion!r}; choose from {CONVERSIONS}")


# ---------------------------------------------------------------------------
# the implementations under test (swappable)


def dcp_save(state_dict: dict[str, Any], checkpoint_id: str, process_group: dist.ProcessGroup) -> None:
    """DCP's own save over ``process_group``."""
    dcp.save(state_dict, checkpoint_id=checkpoint_id, process_group=process_group)


def dcp_load(state_dict: dict[str, Any], checkpoint_id: str, process_group: dist.ProcessGroup) -> None:
    """DCP's own load over ``process_group``."""
    dcp.load(state_dict, checkpoint_id=checkpoint_id, process_group=process_group)


# ---------------------------------------------------------------------------
# on the ranks

_MESHES: dict[tuple[str, int], DeviceMesh] = {}


def first_ranks_mesh(device_type: str, ranks: int) -> DeviceMesh:
    """The 1-D DeviceMesh over ranks ``0 .. ranks - 1`` of the pool, built once per rank process (creating
    its group is a collective of every rank: all of them get here in the same example)."""
    key = (device_type, ranks)
    if key not in _MESHES:
        with keep_process_groups():  # cached for the process's life: not destroyed after the example
            _MESHES[key] = DeviceMesh(device_type, list(range(ranks)))
    return _MESHES[key]


def _full(entry: Entry, device: torch.device) -> torch.Tensor:
    return entry.spec.materialize(device, entry.seed)


def _piece(full: torch.Tensor, mesh: DeviceMesh, name: str) -> torch.Tensor:
    """This rank's piece of ``full`` as ``name`` places it on ``mesh`` (the whole of a plain tensor)."""
    if name == PLAIN:
        return full.clone()
    coordinate = mesh.get_coordinate()
    assert coordinate is not None, "only the mesh's ranks build pieces"
    return dtensor.expected_local(full, (mesh.size(),), tuple(coordinate), (name,)).clone()


def _tensor(full: torch.Tensor, mesh: DeviceMesh, name: str, local: torch.Tensor) -> Any:
    """``local`` as ``name`` places it: a DTensor of ``full``'s shape on ``mesh``, or ``local`` itself."""
    if name == PLAIN:
        return local
    return DTensor.from_local(
        local, mesh, [dtensor.placement(name)], run_check=False, shape=full.shape, stride=full.contiguous().stride()
    )


def reshard(
    ctx: RankContext,
    case: ReshardCase,
    path: str,
    save: Callable[..., Any] = dcp_save,
    load: Callable[..., Any] = dcp_load,
) -> list[Problem] | None:
    """On every rank: save ``case`` from the first ``save_ranks`` ranks (or convert a ``torch.save`` file on
    rank 0), load it on the first ``load_ranks``, and compare (see the module docstring)."""
    if max(case.save_ranks, case.load_ranks) > ctx.world_size:
        raise InvalidArgument(
            f"the case needs {max(case.save_ranks, case.load_ranks)} ranks; this pool has "
            f"{ctx.world_size}: draw it with reshard_cases({ctx.world_size})"
        )
    save_mesh = first_ranks_mesh(ctx.device.type, case.save_ranks)
    load_mesh = first_ranks_mesh(ctx.device.type, case.load_ranks)
    fulls = {f"e{i}": _full(entry, ctx.device) for i, entry in enumerate(case.entries)}
    entries = dict(zip(fulls, case.entries, strict=True))
    problems: list[Problem] = []
    file = os.path.join(path, "whole.pt")
    dcp_dir = os.path.join(path, "dcp")
    if case.conversion == "torch_save_to_dcp":
        if ctx.rank == 0:
            torch.save(fulls, file)
            torch_save_to_dcp(file, dcp_dir)
    elif ctx.rank < case.save_ranks:
        state = {
            key: _tensor(
                full, save_mesh, entries[key].save_placement, _piece(full, save_mesh, entries[key].save_placement)
            )
            for key, full in fulls.items()
        }
        save(state, dcp_dir, save_mesh.get_group())
    dist.barrier(group=ctx.group)
    if case.conversion == "dcp_to_torch_save" and ctx.rank == 0:
        dcp_to_torch_save(dcp_dir, file)
        whole = torch.load(file, weights_only=True)
        problems += keyed_differences(
            whole,
            fulls,
            lambda key: f"{key} in the dcp_to_torch_save file",
            lambda key: f"{key} from dcp_to_torch_save",
        )
    if ctx.rank < case.load_ranks:
        expected = {key: _piece(full, load_mesh, entries[key].load_placement) for key, full in fulls.items()}
        allocated = {key: decoy_of(piece) for key, piece in expected.items()}
        state = {
            key: _tensor(fulls[key], load_mesh, entries[key].load_placement, local) for key, local in allocated.items()
        }
        load(state, dcp_dir, load_mesh.get_group())
        for key, piece in expected.items():
            where = entries[key].load_placement
            problem = first_difference(allocated[key], piece, f"{key} loaded as {where} on {case.load_ranks} ranks")
            if problem is not None:
                problems.append(problem)
    dist.barrier(group=ctx.group)  # nobody removes the directory while a rank still reads it
    return capped(problems) or None


# ---------------------------------------------------------------------------
# the strategy


def _placements(ndim: int, plain: bool) -> st.SearchStrategy[str]:
    names = ["R"] + [f"S{d}" for d in range(ndim)]
    return st.just(PLAIN) if plain else st.sampled_from(names)


@st.composite
def _entry(draw: st.DrawFn, dtypes: st.SearchStrategy[torch.dtype]) -> Entry:
    spec = draw(fst.tensor_specs(layouts="contiguous", dtypes=dtypes, max_bytes=MAX_BYTES, max_dims=3))
    plain = draw(st.booleans())
    ndim = len(spec.shape)
    return Entry(spec, draw(fst.seeds()), draw(_placements(ndim, plain)), draw(_placements(ndim, plain)))


def reshard_cases(
    world_size: int, dtypes: st.SearchStrategy[torch.dtype] | None = None
) -> st.SearchStrategy[ReshardCase]:
    """Cases for a pool of ``world_size`` ranks (at least 2): two different world sizes of at most
    ``world_size`` ranks, 1 to :data:`MAX_ENTRIES` tensors of any CPU dtype (``fst.dtypes()``), shape and
    placement (Replicate or Shard of any dim; plain tensors), and a conversion.  Shrinks towards saving on 1
    rank and loading on 2, one small plain tensor, no conversion."""
    if world_size < 2:
        raise InvalidArgument(f"world_size={world_size}: resharding needs two world sizes, so a pool of 2 or more")
    sizes = st.tuples(st.integers(1, world_size), st.integers(1, world_size)).filter(lambda s: s[0] != s[1])
    return st.builds(
        lambda s, entries, conversion: ReshardCase(s[0], s[1], tuple(entries), conversion),
        sizes,
        st.lists(_entry(dtypes or fst.dtypes()), min_size=1, max_size=MAX_ENTRIES),
        st.sampled_from(CONVERSIONS),
    )


# ---------------------------------------------------------------------------
# the driver-side check


def check(
    pool: Pool,
    case: ReshardCase,
    *,
    save: Callable[..., Any] = dcp_save,
    load: Callable[..., Any] = dcp_load,
    base_dir: str | None = None,
) -> None:
    """Save ``case`` on some ranks of ``pool`` and load it on others (see the module docstring); raise
    :class:`PropertyFailure` if any rank loaded other values than were saved.  The checkpoint lives in a
    fresh directory under ``base_dir``, removed after the example, also when it fails."""
    with known_failures("reshard", case=case):
        results = run_in_checkpoint_dir(pool, reshard, case, base_dir, save=save, load=load)
        fail_on_ranks_with_problems(results, f"loaded other values than {case.save_ranks} ranks saved")
