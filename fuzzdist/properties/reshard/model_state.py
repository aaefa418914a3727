"""Model and optimizer state across world sizes: a DDP, FSDP2 or FSDP1 model and its optimizer, saved with
``get_state_dict`` and ``dcp.save`` from the first W ranks of the pool, loaded with ``dcp.load`` and
``set_state_dict`` into the first W' != W ranks under another drawn sharding: every parameter, optimizer
state tensor, step and learning rate comes back bitwise.

The values are not trained but set (as the checkpoint family does at one world size): every parameter and
optimizer state tensor is rebuilt from the case's seed and its name (``checkpoint.model_state.seeded``), so
the expected value of every rank's piece is known exactly, whatever sharding holds it.  The saving model is
built from other values first, and the loading one from others again, with another learning rate, so a value
that was not loaded shows.

What the docs promise.  ``get_state_dict``: it returns "a model and optimizer state_dict that can be resharded
with a different number of trainers and/or different parallelisms", for "any module that is parallelized by
PyTorch FSDP/fully_shard, DDP/replicate"; ``dcp.load``: "DCP supports load-time resharding".

Shardings drawn (:class:`Sharding`): DDP over the ranks' group; FSDP2 (``fully_shard``) on their 1-D mesh,
the root alone or every Linear first; FSDP1 (``FullyShardedDataParallel(use_orig_params=True)``) over their
group with ``FULL_SHARD``, ``SHARD_GRAD_OP`` or ``NO_SHARD``.  Where each rank's piece of an FSDP1 parameter
lies is read from its flat parameter's documented ``_shard_param_infos`` ("use to get part of the parameter
in the local shard from a flattened version of the unsharded parameter").  Not drawn: FSDP1 without
``use_orig_params`` (its optimizer holds one flat parameter, not the model's), HYBRID_SHARD and 2-D meshes
(the fsdp1 and checkpoint families draw them at one world size).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor, Shard

from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import dtensor
from fuzzdist.properties._results import fail_on_ranks_with_problems
from fuzzdist.properties.checkpoint import run_in_checkpoint_dir
from fuzzdist.properties.checkpoint.model_state import (
    OPTIMIZERS,
    build_model,
    fully_shard_mlp,
    optimizer_with_state,
    refuse_unknown_model,
    seeded,
    seeded_step,
)
from fuzzdist.properties.reshard import dcp_load, dcp_save, first_ranks_mesh
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import first_difference
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

__all__ = ["KINDS", "ModelReshardCase", "Sharding", "check_model", "model_reshard_cases", "reshard_model"]

KINDS = ("ddp", "fsdp2", "fsdp1")
"""The wrappers drawn, in shrink order."""
FSDP1_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD")
_STATE_KEYS = ("momentum_buffer", "exp_avg", "exp_avg_sq")
_LRS = (0.5, 0.25, 1e-3)


@dataclass(frozen=True)
class Sharding:
    """How one side holds the model: ``kind`` one of :data:`KINDS`; ``per_layer`` (FSDP2) shards every
    Linear before the root; ``strategy`` (FSDP1) names a ``ShardingStrategy``."""

    kind: str = "ddp"
    per_layer: bool = False
    strategy: str = "FULL_SHARD"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgument(f"kind={self.kind!r}; choose from {KINDS}")
        if self.strategy not in FSDP1_STRATEGIES:
            raise InvalidArgument(f"strategy={self.strategy!r}; choose from {FSDP1_STRATEGIES}")


@dataclass(frozen=True)
class ModelReshardCase:
    """The first ``save_ranks`` ranks save an MLP of ``widths`` under ``save`` with its ``optimizer`` (learning
    rate ``lr``), every value set from ``seed``; the first ``load_ranks`` ranks load it under ``load``."""

    save_ranks: int
    load_ranks: int
    widths: tuple[int, ...] = (1, 1)
    optimizer: str = "sgd"
    lr: float = 0.5
    seed: int = 0
    save: Sharding = field(default_factory=Sharding)
    load: Sharding = field(default_factory=Sharding)

    def __post_init__(self) -> None:
        if self.save_ranks == self.load_ranks or min(self.save_ranks, self.load_ranks) < 1:
            raise InvalidArgument(
                f"save_ranks {self.save_ranks} and load_ranks {self.load_ranks} must be two "
                "different positive world sizes"
            )
        refuse_unknown_model(self.widths, self.optimizer)


# ---------------------------------------------------------------------------
# where each rank's piece of a parameter lies

# (the full shape, this rank's expected piece of a full value, shaped as the local tensor)
Layout = tuple[tuple[int, ...], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _dtensor_layout(p: torch.Tensor) -> Layout:
    """A DTensor's global shape and its ``torch.chunk`` piece (a plain tensor: the whole)."""
    if not isinstance(p, DTensor):
        return tuple(p.shape), lambda full, local: full
    mesh: DeviceMesh = p.device_mesh
    coordinate = mesh.get_coordinate()
    assert coordinate is not None, "only the mesh's ranks hold the model"
    names = tuple(f"S{q.dim}" if isinstance(q, Shard) else "R" for q in p.placements)  # FSDP2 draws no others
    return tuple(p.shape), lambda full, local: dtensor.expected_local(full, tuple(mesh.shape), tuple(coordinate), names)


def _fsdp1_layouts(model: nn.Module) -> dict[int, Layout]:
    """Each ``use_orig_params`` parameter's full shape and the part of its flattened full value that this
    rank's flat-parameter shard holds, by the parameter's id."""
    layouts: dict[int, Layout] = {}
    for module in model.modules():
        handle = getattr(module, "_handle", None)
        flat = getattr(handle, "flat_param", None)
        if flat is None or flat._params is None:
            continue
        for param, shape, info in zip(flat._params, flat._shapes, flat._shard_param_infos, strict=True):

            def piece(full: torch.Tensor, local: torch.Tensor, info: Any = info) -> torch.Tensor:
                if not info.in_shard:
                    return full.flatten()[:0].reshape(local.shape)
                return full.flatten()[info.intra_param_start_idx : info.intra_param_end_idx + 1].reshape(local.shape)

            layouts[id(param)] = (tuple(shape), piece)
    return layouts


TIMEOUT_S = 120.0
"""The pool timeout this property needs: one example builds a DDP, FSDP2 or FSDP1 model twice (each a
collective construction over its own subgroup), saves and loads with DCP; the first DDP a fresh rank builds
imports and initialises its machinery, which took past the default 30 s at a load of 38 on two cores (every
rank in DDP's constructor, even over a one-rank group, where no peer can be missing)."""


# ---------------------------------------------------------------------------
# on the ranks


def _wrap(model: nn.Module, how: Sharding, mesh: DeviceMesh) -> nn.Module:
    """``model`` held as ``how`` says, over ``mesh`` (and its group)."""
    if how.kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, process_group=mesh.get_group())
    if how.kind == "fsdp2":
        return fully_shard_mlp(model, mesh, how.per_layer)
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

    return FullyShardedDataParallel(
        model,
        process_group=mesh.get_group(),
        sharding_strategy=ShardingStrategy[how.strategy],
        use_orig_params=True,
        device_id=torch.device("cpu"),
    )


def _model(
    case: ModelReshardCase, how: Sharding, mesh: DeviceMesh, init_seed: int, lr: float
) -> tuple[nn.Module, nn.Module, torch.optim.Optimizer, dict[int, Layout]]:
    """(the plain module, its wrapped form, an optimizer with its state created, each parameter's layout)."""
    inner = build_model(case.widths, init_seed)
    model = _wrap(inner, how, mesh)
    optimizer = optimizer_with_state(case.optimizer, model, lr)
    fsdp1 = _fsdp1_layouts(model) if how.kind == "fsdp1" else {}
    layouts = {id(p): fsdp1.get(id(p)) or _dtensor_layout(p) for p in inner.parameters()}
    return inner, model, optimizer, layouts


def _seeded_values(
    inner: nn.Module, optimizer: torch.optim.Optimizer, layouts: dict[int, Layout], seed: int
) -> list[tuple[str, torch.Tensor, torch.Tensor | float]]:
    """(what, this rank's tensor, the piece of its seeded value it must hold, or the step count) for every
    parameter and optimizer state entry."""
    values: list[tuple[str, torch.Tensor, torch.Tensor | float]] = []
    for fqn, p in inner.named_parameters():
        shape, piece = layouts[id(p)]
        local = _local(p.detach())
        values.append((f"parameter {fqn}", local, piece(seeded(shape, seed, fqn), local)))
        for key, value in sorted(optimizer.state.get(p, {}).items()):
            if key in _STATE_KEYS:
                local = _local(value)
                values.append((f"optimizer state {fqn}.{key}", local, piece(seeded(shape, seed, fqn, key), local)))
            elif key == "step":
                values.append((f"optimizer state {fqn}.step", value, seeded_step(seed, fqn)))
    return values


def _set_seeded(inner: nn.Module, optimizer: torch.optim.Optimizer, layouts: dict[int, Layout], seed: int) -> None:
    with torch.no_grad():
        for _, local, expected in _seeded_values(inner, optimizer, layouts, seed):
            if isinstance(expected, torch.Tensor):
                local.copy_(expected)
            else:
                local.fill_(expected)


def _check_seeded(
    inner: nn.Module, optimizer: torch.optim.Optimizer, layouts: dict[int, Layout], case: ModelReshardCase
) -> list[Problem]:
    where = f"loaded under {case.load.kind} on {case.load_ranks} ranks"
    problems = [
        Problem(Kind.MISMATCH, f"{where}: optimizer lr", got=group["lr"], expected=case.lr)
        for group in optimizer.param_groups
        if group["lr"] != case.lr
    ]
    for what, local, expected in _seeded_values(inner, optimizer, layouts, case.seed):
        if isinstance(expected, torch.Tensor):
            problem = first_difference(local, expected, f"{where}: {what}")
        else:
            got = float(local.item()) if isinstance(local, torch.Tensor) else float(local)
            same = got == expected
            problem = None if same else Problem(Kind.MISMATCH, f"{where}: {what}", got=got, expected=expected)
        if problem is not None:
            problems.append(problem)
    return problems


def reshard_model(
    ctx: RankContext,
    case: ModelReshardCase,
    path: str,
    save: Callable[..., Any] = dcp_save,
    load: Callable[..., Any] = dcp_load,
) -> list[Problem] | None:
    """On every rank: the first ``save_ranks`` set the seeded state under ``case.save`` and save it with
    ``get_state_dict`` and ``save``; the first ``load_ranks`` load it under ``case.load`` with
    ``get_state_dict``, ``load`` and ``set_state_dict`` and check it (see the module docstring)."""
    if max(case.save_ranks, case.load_ranks) > ctx.world_size:
        raise InvalidArgument(
            f"the case needs {max(case.save_ranks, case.load_ranks)} ranks; this pool has "
            f"{ctx.world_size}: draw it with model_reshard_cases({ctx.world_size})"
        )
    save_mesh = first_ranks_mesh(ctx.device.type, case.save_ranks)  # every rank: creating a group is collective
    load_mesh = first_ranks_mesh(ctx.device.type, case.load_ranks)
    problems: list[Problem] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # FSDP1's and ShardedTensor's deprecation notices
        warnings.simplefilter("ignore", UserWarning)
        if ctx.rank < case.save_ranks:
            inner, model, optimizer, layouts = _model(case, case.save, save_mesh, case.seed + 2, case.lr)
            _set_seeded(inner, optimizer, layouts, case.seed)
            model_sd, optim_sd = get_state_dict(model, optimizer)
            save({"model": model_sd, "optim": optim_sd}, path, save_mesh.get_group())
        dist.barrier(group=ctx.group)
        if ctx.rank < case.load_ranks:
            inner, model, optimizer, layouts = _model(case, case.load, load_mesh, case.seed + 1, case.lr * 2)
            model_sd, optim_sd = get_state_dict(model, optimizer)
            load({"model": model_sd, "optim": optim_sd}, path, load_mesh.get_group())  # in place, into these
            set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
            problems = _check_seeded(inner, optimizer, layouts, case)
        dist.barrier(group=ctx.group)  # nobody removes the directory while a rank still reads it
    return capped(problems) or None


# ---------------------------------------------------------------------------
# the strategy


@st.composite
def shardings(draw: st.DrawFn) -> Sharding:
    """DDP, FSDP2 (root alone or per Linear) or FSDP1 (a drawn strategy).  Shrinks to DDP."""
    kind = draw(st.sampled_from(KINDS))
    if kind == "fsdp2":
        return Sharding(kind, per_layer=draw(st.booleans()))
    if kind == "fsdp1":
        return Sharding(kind, strategy=draw(st.sampled_from(FSDP1_STRATEGIES)))
    return Sharding(kind)


def model_reshard_cases(
    world_size: int, *, max_depth: int = 3, max_width: int = 6
) -> st.SearchStrategy[ModelReshardCase]:
    """Cases for a pool of ``world_size`` ranks (at least 2): two different world sizes of at most
    ``world_size``, an MLP of 1 to ``max_depth`` Linear layers of widths 1 to ``max_width`` (so pieces the
    world size does not divide, and empty ones), SGD with momentum or Adam, a learning rate, a seed, and the
    sharding saved from and the one loaded into.  Shrinks towards saving on 1 rank and loading on 2, one 1->1
    layer, SGD, DDP to DDP."""
    if world_size < 2:
        raise InvalidArgument(f"world_size={world_size}: resharding needs two world sizes, so a pool of 2 or more")
    sizes = st.tuples(st.integers(1, world_size), st.integers(1, world_size)).filter(lambda s: s[0] != s[1])
    return st.builds(
        lambda s, widths, optimizer, lr, seed, save, load: ModelReshardCase(
            s[0], s[1], tuple(widths), optimizer, lr, seed, save, load
        ),
        sizes,
        st.lists(st.integers(1, max_width), min_size=2, max_size=max_depth + 1),
        st.sampled_from(OPTIMIZERS),
        st.sampled_from(_LRS),
        seeds(),
        shardings(),
        shardings(),
    )


# ---------------------------------------------------------------------------
# the driver-side check


def check_model(
    pool: Pool,
    case: ModelReshardCase,
    *,
    save: Callable[..., Any] = dcp_save,
    load: Callable[..., Any] = dcp_load,
    base_dir: str | None = None,
) -> None:
    """Save ``case``'s model and optimizer state on some ranks of ``pool`` and load it on others under another
    sharding (see the module docstring); raise :class:`PropertyFailure` if any loading rank's parameters,
    optimizer state or learning rate differ from the saved ones.  The checkpoint lives in a fresh directory
    under ``base_dir``, removed after the example, also when it fails."""
    with known_failures("reshard", case=case):
        results = run_in_checkpoint_dir(pool, reshard_model, case, base_dir, save=save, load=load)
        fail_on_ranks_with_problems(
            results, f"loaded another model or optimizer state than {case.save_ranks} ranks saved"
        )
