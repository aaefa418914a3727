"""A DDP or FSDP2 model and its optimizer saved with ``get_state_dict`` and ``dcp.save``, loaded with
``dcp.load`` and ``set_state_dict`` under another drawn parallelism: parameters, optimizer state and learning
rate come back, bitwise."""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import dtensor
from fuzzdist.properties._results import fail_on_ranks_with_problems
from fuzzdist.properties.checkpoint.state_dict import (
    HAS_NO_DIST_LOAD,
    SEEDS,
    _names,
    _report,
    dcp_load,
    dcp_save,
    run_in_checkpoint_dir,
)
from fuzzdist.toolkit.checks import first_difference

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

# ---------------------------------------------------------------------------
# model and optimizer state: get_state_dict / set_state_dict

PARALLELISMS = ("ddp", "fsdp")
OPTIMIZERS = ("sgd", "adam")  # SGD with momentum (a buffer per parameter), Adam (two moments and a step)
_STATE_KEYS = ("momentum_buffer", "exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class Parallelism:
    """How a model is distributed: ``"ddp"`` (``DistributedDataParallel`` over the pool's group),
    ``"fsdp"`` (``fully_shard`` on a mesh of ``mesh_shape``: ``(W,)``, or ``(replicate, shard)`` for
    HSDP; every Linear first with ``per_layer``, then the root) or ``"none"`` (the plain model)."""

    kind: str = "ddp"
    mesh_shape: tuple[int, ...] = ()
    per_layer: bool = False


@dataclass(frozen=True)
class ModelCase:
    """One example of the model property: an MLP of ``widths`` (Linear layers with ReLU between),
    its ``optimizer`` with learning rate ``lr``, parameters and optimizer state set from ``seed``,
    saved under ``save`` and loaded under ``load``; with ``single_process``, also loaded by rank 0
    alone into the plain model with ``no_dist=True``."""

    widths: tuple[int, ...] = (1, 1)
    optimizer: str = "sgd"
    lr: float = 0.5
    seed: int = 0
    save: Parallelism = field(default_factory=Parallelism)
    load: Parallelism = field(default_factory=Parallelism)
    single_process: bool = False

    def __post_init__(self) -> None:
        refuse_unknown_model(self.widths, self.optimizer)


def refuse_unknown_model(widths: tuple[int, ...], optimizer: str) -> None:
    """Raise :class:`~fuzzdist.errors.InvalidArgument` unless ``widths`` describes an MLP (two or more widths,
    each at least 1) and ``optimizer`` is one of :data:`OPTIMIZERS`: the check of every case that builds one."""
    if len(widths) < 2 or min(widths) < 1:
        raise InvalidArgument(f"widths needs >= 2 entries, all >= 1, got {widths}")
    if optimizer not in OPTIMIZERS:
        raise InvalidArgument(f"unknown optimizer {optimizer!r}; choose from {OPTIMIZERS}")


def _seed_of(seed: int, *names: str) -> int:
    return zlib.crc32("/".join(names).encode(), seed % 2**32)


def seeded(shape: tuple[int, ...], seed: int, *names: str) -> torch.Tensor:
    """The full float32 value of the tensor ``names`` name (a parameter, or a parameter and an
    optimizer state key), rebuilt from ``seed`` alone."""
    return fst.TensorSpec(tuple(shape), torch.float32).materialize("cpu", _seed_of(seed, *names))


def seeded_step(seed: int, fqn: str) -> float:
    """The optimizer step count set for parameter ``fqn`` (an integer in [2, 1000])."""
    return float(2 + _seed_of(seed, fqn, "step") % 999)


def build_model(widths: tuple[int, ...], seed: int) -> nn.Module:
    """The MLP of ``widths``, initialised from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:], strict=False)):
        if i:
            layers.append(nn.ReLU())
        linear = nn.Linear(a, b)
        with torch.no_grad():
            for p in linear.parameters():
                p.copy_(torch.rand(p.shape, generator=gen))
        layers.append(linear)
    return nn.Sequential(*layers)


def _distribute_model(ctx: RankContext, model: nn.Module, how: Parallelism) -> nn.Module:
    if how.kind == "none":
        return model
    if how.kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, process_group=ctx.group)
    from fuzzdist.properties import fsdp  # FSDP2: only where the torch has fully_shard

    return fully_shard_mlp(model, fsdp.device_mesh(ctx.device.type, how.mesh_shape), how.per_layer)


def fully_shard_mlp(model: nn.Module, mesh: DeviceMesh, per_layer: bool) -> nn.Module:
    """``model`` (a :func:`build_model` MLP) sharded by FSDP2's ``fully_shard`` over ``mesh``: with
    ``per_layer`` every Linear first, then the root."""
    from fuzzdist.properties import fsdp  # FSDP2: only where the torch has fully_shard

    if per_layer:
        for module in model.children():
            if isinstance(module, nn.Linear):
                fsdp.fully_shard(module, mesh=mesh)
    fsdp.fully_shard(model, mesh=mesh)
    return model


def optimizer_with_state(name: str, model: nn.Module, lr: float) -> torch.optim.Optimizer:
    """The optimizer ``name`` (one of :data:`OPTIMIZERS`: SGD with momentum 0.9, or Adam) over ``model``'s
    parameters with learning rate ``lr``, its state created by one step on zero gradients (which changes no
    parameter), the gradients cleared after."""
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9) if name == "sgd" else torch.optim.Adam(params, lr=lr)
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()  # zero gradients: creates the state, changes no parameter
    optimizer.zero_grad(set_to_none=True)
    return optimizer


def _local_and_expected(t: torch.Tensor, full: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(this rank's tensor of ``t``, the part of ``full`` it must hold): a DTensor's local shard and
    its ``torch.chunk`` piece, or a plain tensor and ``full``."""
    if not isinstance(t, DTensor):
        return t, full
    mesh: DeviceMesh = t.device_mesh
    coordinate = mesh.get_coordinate()
    assert coordinate is not None
    piece = dtensor.expected_local(full, tuple(mesh.shape), tuple(coordinate), _names(tuple(t.placements)))
    return t.to_local(), piece


def _model(
    ctx: RankContext, case: ModelCase, how: Parallelism, init_seed: int, lr: float
) -> tuple[nn.Module, nn.Module, torch.optim.Optimizer]:
    """(the plain module, its distributed form, an optimizer with its state initialised)."""
    inner = build_model(case.widths, init_seed)
    model = _distribute_model(ctx, inner, how)
    return inner, model, optimizer_with_state(case.optimizer, model, lr)


def set_seeded_state(inner: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> None:
    """Set every parameter and optimizer state tensor of ``inner`` to its value from ``seed``."""
    with torch.no_grad():
        for fqn, p in inner.named_parameters():
            local, piece = _local_and_expected(p, seeded(tuple(p.shape), seed, fqn))
            local.copy_(piece)
            for key, value in optimizer.state[p].items():
                if key in _STATE_KEYS:
                    local, piece = _local_and_expected(value, seeded(tuple(value.shape), seed, fqn, key))
                    local.copy_(piece)
                elif key == "step":
                    value.fill_(seeded_step(seed, fqn))


def check_seeded_state(inner: nn.Module, optimizer: torch.optim.Optimizer, case: ModelCase, what: str) -> list[Problem]:
    """What differs in ``inner``'s parameters and ``optimizer``'s state from the values of
    ``case.seed`` and ``case.lr``."""
    problems = []
    for group in optimizer.param_groups:
        if group["lr"] != case.lr:
            problems.append(Problem(Kind.MISMATCH, f"{what}: optimizer lr", got=group["lr"], expected=case.lr))
    for fqn, p in inner.named_parameters():
        local, piece = _local_and_expected(p.detach(), seeded(tuple(p.shape), case.seed, fqn))
        diff = first_difference(local, piece, f"{what}: parameter {fqn}")
        if diff is not None:
            problems.append(diff)
        state = optimizer.state.get(p, {})
        for key in (*_STATE_KEYS, "step"):
            if key not in state and not (key == "step" and case.optimizer == "sgd"):
                if (key == "momentum_buffer") == (case.optimizer == "sgd"):
                    problems.append(Problem(Kind.MISSING, f"{what}: optimizer state {fqn}.{key}"))
                continue
            if key not in state:
                continue
            value = state[key]
            if key == "step":
                got = float(value) if isinstance(value, (int, float)) else float(value.item())
                if got != seeded_step(case.seed, fqn):
                    problems.append(
                        Problem(
                            Kind.MISMATCH,
                            f"{what}: optimizer state {fqn}.step",
                            got=got,
                            expected=seeded_step(case.seed, fqn),
                        )
                    )
                continue
            local, piece = _local_and_expected(value, seeded(tuple(value.shape), case.seed, fqn, key))
            diff = first_difference(local, piece, f"{what}: optimizer state {fqn}.{key}")
            if diff is not None:
                problems.append(diff)
    return problems


def dsd_set_state_dict(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    model_state_dict: dict[str, Any],
    optim_state_dict: dict[str, Any],
) -> None:
    """torch's own ``set_state_dict``."""
    set_state_dict(model, optimizer, model_state_dict=model_state_dict, optim_state_dict=optim_state_dict)


def _load_model(
    ctx: RankContext,
    case: ModelCase,
    how: Parallelism,
    path: str,
    no_dist: bool,
    load: Callable[..., Any],
    set_state: Callable[..., Any],
) -> tuple[nn.Module, torch.optim.Optimizer]:
    inner, model, optimizer = _model(ctx, case, how, case.seed + 1, case.lr * 2)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    load(state, path, no_dist)
    set_state(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return inner, optimizer


def model_save_and_load(
    ctx: RankContext,
    case: ModelCase,
    path: str,
    save: Callable[..., Any] = dcp_save,
    load: Callable[..., Any] = dcp_load,
    set_state: Callable[..., Any] = dsd_set_state_dict,
) -> list[Problem] | None:
    """On every rank: set a model's and its optimizer's state from the seed under ``case.save``, save
    it with ``get_state_dict`` and ``save``, load it into a fresh model under ``case.load`` with
    ``get_state_dict``, ``load`` and ``set_state``, and check it (and on rank 0, with
    ``case.single_process``, into the plain model with ``no_dist``); None if all is well."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        inner, model, optimizer = _model(ctx, case, case.save, case.seed + 2, case.lr)
        set_seeded_state(inner, optimizer, case.seed)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        save({"model": model_sd, "optim": optim_sd}, path, False)
        problems = check_seeded_state(
            *_load_model(ctx, case, case.load, path, False, load, set_state), case, f"loaded under {case.load.kind}"
        )
        if case.single_process and ctx.rank == 0:
            problems += check_seeded_state(
                *_load_model(ctx, case, Parallelism("none"), path, True, load, set_state),
                case,
                "no_dist load on rank 0 into the plain model",
            )
    return _report(problems)


@st.composite
def parallelisms(draw: st.DrawFn, world_size: int) -> Parallelism:
    """DDP, or FSDP2 on every 1-D and HSDP mesh shape of ``world_size`` ranks, root-only or per
    layer.  Shrinks to DDP."""
    kind = draw(st.sampled_from(PARALLELISMS))
    if kind == "ddp":
        return Parallelism("ddp")
    mesh_shape = draw(st.sampled_from(fst.mesh_shapes(world_size)))
    return Parallelism("fsdp", mesh_shape, draw(st.booleans()))


@st.composite
def model_cases(draw: st.DrawFn, world_size: int, max_depth: int = 3, max_width: int = 6) -> ModelCase:
    """A ``ModelCase``: an MLP of 1 to ``max_depth`` Linear layers of widths 1 to ``max_width``, SGD
    with momentum or Adam, learning rate, seed, the parallelism saved from and the one loaded into
    (each DDP or FSDP2 on a drawn mesh), and the extra single-process load.  Shrinks to one 1->1
    layer, SGD, lr 0.5, seed 0, DDP to DDP, pool load only."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InvalidArgument(f"world_size must be an int >= 1, got {world_size!r}")
    widths = tuple(draw(st.lists(st.integers(1, max_width), min_size=2, max_size=max_depth + 1), label="widths"))
    optimizer = draw(st.sampled_from(OPTIMIZERS), label="optimizer")
    lr = draw(st.sampled_from([0.5, 0.25, 1e-3, 3e-4]), label="lr")
    seed = draw(SEEDS, label="seed")
    save = draw(parallelisms(world_size), label="save")
    load = draw(parallelisms(world_size), label="load")
    single = draw(st.booleans(), label="single_process") if HAS_NO_DIST_LOAD else False
    return ModelCase(widths, optimizer, lr, seed, save, load, single)


def check_model(
    pool: Pool,
    case: ModelCase,
    *,
    save: Callable[..., Any] = dcp_save,
    load: Callable[..., Any] = dcp_load,
    set_state: Callable[..., Any] = dsd_set_state_dict,
    base_dir: str | None = None,
) -> None:
    """Save ``case``'s model and optimizer state on every rank of ``pool`` and load it into the other
    parallelism (``save``/``load`` as in :func:`check`; ``set_state(model, optimizer, model_state_dict=,
    optim_state_dict=)``, torch's ``set_state_dict`` by default); raise :class:`PropertyFailure` if
    any rank's parameters, optimizer state or learning rate differ from the saved ones."""
    results = run_in_checkpoint_dir(
        pool, model_save_and_load, case, base_dir, save=save, load=load, set_state=set_state
    )
    fail_on_ranks_with_problems(results, "loaded another model or optimizer state than was saved")
