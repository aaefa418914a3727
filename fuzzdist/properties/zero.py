"""ZeRO parity: ``ZeroRedundancyOptimizer`` under DDP trains the model a local optimizer trains.

The contract, from ``torch.distributed.optim.ZeroRedundancyOptimizer``'s documentation:

* it "wraps an arbitrary ``optim.Optimizer`` and shards its states across ranks": "the local
  optimizer instance in each rank is only responsible for updating approximately
  ``1 / world_size`` parameters ... After parameters are updated locally, each rank will
  broadcast its parameters to all other peers to keep all model replicas in the same state".
  So after every ``step()``, every rank's parameters equal those of one local optimizer of the
  same class and hyperparameters stepping *all* the parameters with the same gradients, and
  are bitwise equal on every rank.  Under DDP those gradients are the mean over the ranks of
  each rank's local gradient (each rank's batch is drawn on its own);
* ``add_param_group`` "handles updating the shards on all partitions" (called on every rank);
* ``consolidate_state_dict(to=r)`` (on all ranks) gathers the state on rank ``r``, whose
  ``state_dict()`` then returns "the last global optimizer state": the state dict a local
  optimizer over all the parameters would return.  Only rank ``r`` has it ("If the state has not
  been consolidated to this rank, this raises a runtime error"), so it is handed over the way a
  checkpoint is: rank ``r`` saves it with ``torch.save`` to a file every rank reads with
  ``torch.load``.  A fresh optimizer built the same way (same parameter groups) then takes it
  with ``load_state_dict`` ("Load the state pertaining to the given rank from the input
  ``state_dict``") and must continue exactly as the optimizer that was never reloaded.

What each example checks, at every step, on every rank:

* after backward, DDP's gradients equal the exact (float64) mean of the ranks' local gradients,
  computed on a local copy of the model with no communication, within the bound below;
* after ``step()``, the parameters equal the reference model's, stepped by a local optimizer of
  the same class over the same parameter groups from the same values and gradients, within
  2 eps of the dtype, relative;
* after a reload, the consolidated ``state_dict()`` equals the reference optimizer's
  (``param_groups`` without the ``params`` lists exactly, every state tensor within tolerance);
* gradients and parameters are bitwise equal on every rank.

Tolerances.  Gradients: DDP divides each rank's gradient by W and all-reduces them over gloo in
its own order; the reference sums in float64.  That is at most W + 1 roundings in the dtype, each
within eps relative to the terms, so each element must be within
``(W + 1) * eps * mean_r |g_r| + eps * smallest_normal`` of the exact mean: a bound on rounding
alone, which no lost, doubled or misplaced contribution fits into.  Parameters: once the gradients
are checked, the reference takes DDP's gradients (and, once checked, ZeRO's parameters), so each
step is checked from the same start: ZeRO's local optimizer and the reference then do the same
elementwise arithmetic (torch.optim's per-parameter code on CPU; measured bitwise equal over 450
examples at 2 and 3 ranks), and only differently vectorised kernels (``foreach`` on other devices)
could differ, by a last bit or two: ``2 * eps * |expected| + smallest_normal``.  That is far below
any update worth checking: ``assert_close``'s defaults (atol 1e-5) would let a lost update of
``lr * g`` = 0.01 * 1e-3 pass.  Without the reset, a last-bit difference in a near-zero gradient
would be amplified by Adam's normalisation into a false failure some steps on.

Drawn (``zero_cases``): the model (a chain of up to 3 Linear layers of widths 1 to 4, each with or
without bias: one parameter of one element, fewer parameters than ranks, or sizes as uneven as 16
and 1); per-rank batch sizes; 1 to 3 steps; the optimizer: SGD (momentum, dampening, nesterov,
weight decay), Adam and AdamW (betas, eps, weight decay, amsgrad), with values inside the ranges
torch.optim accepts (nesterov only with momentum > 0 and dampening 0, as SGD requires); the
model's dtype (float32, float64); ``parameters_as_bucket_view``; up to three parameter groups with
their own learning rates, some given at construction and the rest added with ``add_param_group``
before a drawn step; a consolidate/save/load round trip after a drawn step, to a drawn rank.

Not drawn:

* ``overlap_with_ddp=True`` training.  Its documented hooks
  (``ddp_comm_hooks.ddp_zero_hook.hook_with_zero_step`` and ``..._interleaved``) say: "Raises
  RuntimeError: if using any backend other than NCCL/HCCL since currently Gloo may hang".  On gloo
  an example drawn with ``overlap_with_ddp`` checks that documented refusal instead: ZeRO accepts
  ``overlap_with_ddp=True``, and both hooks raise ``RuntimeError`` at once.  Training with it needs
  nccl (one GPU per rank), which this module does not run.
* Parameters of mixed dtypes or sparse ones (the docs: "requires that all of the passed-in
  parameters are the same dense type").
* Learning rates as tensors, ``foreach``/``fused``, ``maximize``, ``capturable``: options of the
  wrapped optimizer, not of ZeRO.

Related to torch's own ``test_zero_redundancy_optimizer.py`` (fixed models and optimizers,
compared with a local optimizer); here everything above is drawn.  The optimizer under test is a
keyword: ``check(pool, case, seed, optimizer_class=MyZeRO)`` runs the property over any class with
``ZeroRedundancyOptimizer``'s constructor and methods.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from fuzzdist.errors import InvalidArgument, InvalidStrategyArgument
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties._results import fail_on_reported_problems
from fuzzdist.strategies import check_ints, mix_seed_fnv, seeds
from fuzzdist.toolkit.checks import Digest, digest, first_disagreement, gradient_problem, tolerance_problem
from fuzzdist.toolkit.models import init_uniform_
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

SEEDS = seeds()
DTYPES = st.sampled_from([torch.float32, torch.float64])
# Parameters and optimizer state: relative tolerance in eps of the dtype (see the module docstring).
PARAM_EPS = 2
OPTIMIZERS = ("sgd", "adam", "adamw")
MAX_WIDTH = 4
MAX_LAYERS = 3
MAX_GROUPS = 3


# ---------------------------------------------------------------------------
# what is drawn


@dataclass(frozen=True)
class OptimizerSpec:
    """A torch.optim optimizer and its hyperparameters, as plain values.

    ``name`` is ``"sgd"`` (``lr``, ``momentum``, ``dampening``, ``nesterov``, ``weight_decay``) or
    ``"adam"``/``"adamw"`` (``lr``, ``betas``, ``eps``, ``weight_decay``, ``amsgrad``); the fields of
    the other kind are ignored.  Construction refuses what torch.optim refuses (negative values,
    betas outside [0, 1), nesterov without momentum or with dampening).
    """

    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    amsgrad: bool = False

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise InvalidArgument(f"unknown optimizer {self.name!r}; choose from {OPTIMIZERS}")
        if min(self.lr, self.momentum, self.dampening, self.weight_decay, self.eps) < 0:
            raise InvalidArgument("lr, momentum, dampening, weight_decay and eps must be >= 0")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise InvalidArgument(f"betas must be in [0, 1), got {self.betas}")
        if self.name == "sgd" and self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise InvalidArgument("SGD's nesterov needs momentum > 0 and dampening 0")

    @property
    def optimizer_class(self) -> type[torch.optim.Optimizer]:
        """The torch.optim class."""
        return {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[self.name]

    def kwargs(self) -> dict[str, Any]:
        """The hyperparameters, as the class's keyword arguments."""
        if self.name == "sgd":
            return {
                "lr": self.lr,
                "momentum": self.momentum,
                "dampening": self.dampening,
                "nesterov": self.nesterov,
                "weight_decay": self.weight_decay,
            }
        return {
            "lr": self.lr,
            "betas": self.betas,
            "eps": self.eps,
            "weight_decay": self.weight_decay,
            "amsgrad": self.amsgrad,
        }


@dataclass(frozen=True)
class ZeroCase:
    """One ZeRO training run, as plain picklable values.

    Model: ``layers[k] = (in, out, bias)``, a chain of Linear layers (``in`` of each layer is the
    previous ``out``) with ReLU between them.  Its parameters, in ``model.parameters()`` order,
    belong to parameter groups ``groups[i]`` (0, 1, ...: numbered by first appearance); groups
    ``0 .. initial_groups - 1`` are given to the constructor, the others are added with
    ``add_param_group`` just before step ``add_step``.  ``group_lrs[g]`` is group g's own learning
    rate (None: the optimizer's).

    Data: ``batch_sizes[r]`` samples on rank r at every one of ``steps`` steps.

    ``reload = (after_step, to)``: after that step's ``step()``, ``consolidate_state_dict(to=to)``,
    hand the state dict over and continue with a fresh optimizer that loaded it.
    ``overlap_with_ddp``: check, on gloo, the documented refusal of the DDP-ZeRO hooks instead of
    training (see the module docstring).
    """

    layers: tuple[tuple[int, int, bool], ...] = ((1, 1, True),)
    batch_sizes: tuple[int, ...] = (1, 1)
    steps: int = 1
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    bucket_view: bool = False
    groups: tuple[int, ...] = ()
    initial_groups: int = 1
    add_step: int = 0
    group_lrs: tuple[float | None, ...] = (None,)
    reload: tuple[int, int] | None = None
    overlap_with_ddp: bool = False

    def __post_init__(self) -> None:
        layers = tuple((int(i), int(o), bool(b)) for i, o, b in self.layers)
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "batch_sizes", tuple(int(b) for b in self.batch_sizes))
        if not layers or any(min(i, o) < 1 for i, o, _ in layers):
            raise InvalidArgument("layers needs >= 1 entry (in, out, bias) with in, out >= 1")
        if any(a[1] != b[0] for a, b in zip(layers, layers[1:], strict=False)):
            raise InvalidArgument(f"layers must chain (each in = the previous out), got {layers}")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise InvalidArgument("batch_sizes needs one entry >= 1 per rank")
        if self.steps < 1:
            raise InvalidArgument("steps must be >= 1")
        n = self.num_params
        groups = self.groups or (0,) * n
        object.__setattr__(self, "groups", tuple(groups))
        if len(groups) != n:
            raise InvalidArgument(f"groups needs one entry per parameter ({n}), got {len(groups)}")
        seen: list[int] = []
        for g in groups:
            if g not in seen:
                seen.append(g)
        if seen != list(range(len(seen))):
            raise InvalidArgument(f"groups must be numbered 0, 1, ... in order of first appearance, got {groups}")
        if not 1 <= self.initial_groups <= self.num_groups:
            raise InvalidArgument(f"initial_groups must be in 1..{self.num_groups}")
        if len(self.group_lrs) != self.num_groups:
            raise InvalidArgument("group_lrs needs one entry (a float or None) per group")
        if not 0 <= self.add_step < self.steps:
            raise InvalidArgument("add_step must be a step: 0 <= add_step < steps")
        if self.reload is not None:
            after, to = self.reload
            if not 0 <= after < self.steps - 1:
                raise InvalidArgument("reload's step must be followed by another: 0 <= step < steps - 1")
            if not 0 <= to < self.world_size:
                raise InvalidArgument(f"reload's rank must be in 0..{self.world_size - 1}")
        if self.overlap_with_ddp and self.num_groups > 1:
            raise InvalidArgument("overlap_with_ddp supports a single parameter group only (ZeRO's docs)")

    @property
    def world_size(self) -> int:
        return len(self.batch_sizes)

    @property
    def num_params(self) -> int:
        return sum(2 if bias else 1 for _, _, bias in self.layers)

    @property
    def num_groups(self) -> int:
        return max(self.groups) + 1 if self.groups else 1

    def build_model(self, seed: int, dtype: torch.dtype) -> nn.Module:
        """The model, identical on every rank for the same seed; the global RNG is left alone."""
        gen = torch.Generator().manual_seed(mix_seed_fnv(seed, 0x6D6F64656C))
        modules: list[nn.Module] = []
        for k, (i, o, bias) in enumerate(self.layers):
            if k:
                modules.append(nn.ReLU())
            modules.append(nn.Linear(i, o, bias=bias, dtype=dtype))
        return init_uniform_(nn.Sequential(*modules), gen)

    def make_batch(self, rank: int, step: int, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Rank ``rank``'s (inputs, targets) at ``step``, deterministic in (seed, rank, step)."""
        gen = torch.Generator().manual_seed(mix_seed_fnv(seed, rank, step))
        b = self.batch_sizes[rank]
        x = torch.rand((b, self.layers[0][0]), generator=gen, dtype=torch.float64) * 2 - 1
        y = torch.rand((b, self.layers[-1][1]), generator=gen, dtype=torch.float64) * 2 - 1
        return x.to(dtype), y.to(dtype)

    def param_groups(self, params: Sequence[nn.Parameter], upto: int) -> list[dict[str, Any]]:
        """Groups ``0 .. upto - 1`` as torch.optim param-group dicts over ``params``."""
        out = []
        for g in range(upto):
            group: dict[str, Any] = {"params": [p for p, pg in zip(params, self.groups, strict=True) if pg == g]}
            if self.group_lrs[g] is not None:
                group["lr"] = self.group_lrs[g]
            out.append(group)
        return out

    def __repr__(self) -> str:
        defaults = ZeroCase()
        parts = [f"layers={self.layers}", f"batch_sizes={self.batch_sizes}"]
        for name in (
            "steps",
            "optimizer",
            "bucket_view",
            "groups",
            "initial_groups",
            "add_step",
            "group_lrs",
            "reload",
            "overlap_with_ddp",
        ):
            value = getattr(self, name)
            if name == "groups" and value == (0,) * self.num_params:
                continue
            if name == "group_lrs" and value == (None,):
                continue
            if value != getattr(defaults, name):
                parts.append(f"{name}={value!r}")
        return f"ZeroCase({', '.join(parts)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def optimizer_specs(names: Iterable[str] = OPTIMIZERS) -> st.SearchStrategy[OptimizerSpec]:
    """SGD (momentum 0/0.5/0.9, dampening 0/0.5, nesterov where SGD allows it, weight decay 0/0.01),
    Adam and AdamW (betas, eps, weight decay, amsgrad), learning rates 0.01 to 0.5.  Shrinks to
    plain SGD with lr 0.01, then towards the first option of each field."""
    names = tuple(n for n in OPTIMIZERS if n in tuple(names))
    if not names:
        raise InvalidStrategyArgument(f"names must be a non-empty subset of {OPTIMIZERS}")

    @st.composite
    def draw(draw: st.DrawFn) -> OptimizerSpec:
        # Every field is drawn, whatever the optimizer: a fixed number of choices, so that
        # shrinking one field never shifts the choices of the next ones.
        name = draw(st.sampled_from(names))
        lr = draw(st.sampled_from([0.01, 0.1, 0.5]))
        weight_decay = draw(st.sampled_from([0.0, 0.01]))
        momentum = draw(st.sampled_from([0.0, 0.5, 0.9]))
        dampening = draw(st.sampled_from([0.0, 0.5]))
        nesterov = draw(st.booleans()) and momentum > 0 and dampening == 0
        betas = draw(st.sampled_from([(0.9, 0.999), (0.5, 0.9), (0.0, 0.99)]))
        eps = draw(st.sampled_from([1e-8, 1e-3]))
        amsgrad = draw(st.booleans())
        if name == "sgd":
            return OptimizerSpec(
                name, lr, momentum=momentum, dampening=dampening, nesterov=nesterov, weight_decay=weight_decay
            )
        return OptimizerSpec(name, lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)

    return draw()


def zero_cases(
    world_size: int = 2,
    *,
    max_steps: int = 3,
    max_batch: int = 3,
    overlap: bool = True,
    optimizers: Iterable[str] = OPTIMIZERS,
) -> st.SearchStrategy[ZeroCase]:
    """ZeRO training runs for ``world_size`` ranks.

    Covers chains of 1 to 3 Linear layers of widths 1 to 4, each with or without bias (from one
    parameter of one element, fewer than the ranks, to 6 parameters as uneven as 16 and 1
    elements); batch sizes 1 to ``max_batch`` per rank, even or not; 1 to ``max_steps`` steps;
    ``optimizer_specs``; float32 or float64 is drawn by the test (``DTYPES``);
    ``parameters_as_bucket_view``; 1 to 3 parameter groups (each with the optimizer's lr or its
    own), some added by ``add_param_group`` before a drawn step; a consolidate/save/load round trip
    to a drawn rank after a drawn step (runs of 2 steps or more); and, when ``overlap``, the
    ``overlap_with_ddp`` refusal check (see the module docstring).

    Shrinks towards ``ZeroCase()``: one Linear(1, 1) with bias, batch 1 on every rank, one plain SGD
    step (lr 0.01), no bucket view, one group, no reload, no overlap.
    """
    check_ints(("world_size", world_size, 1), ("max_steps", max_steps, 1), ("max_batch", max_batch, 1))
    specs = optimizer_specs(optimizers)

    @st.composite
    def draw(draw: st.DrawFn) -> ZeroCase:
        # A list of (out, bias) per layer, so that a layer shrinks away as one element.
        width = draw(st.integers(1, MAX_WIDTH))
        outs = draw(st.lists(st.tuples(st.integers(1, MAX_WIDTH), st.booleans()), min_size=1, max_size=MAX_LAYERS))
        layers = []
        for out, no_bias in outs:
            layers.append((width, out, not no_bias))
            width = out
        if world_size > 1 and draw(st.booleans()):
            batch_sizes = tuple(draw(st.integers(1, max_batch)) for _ in range(world_size))
        else:
            batch_sizes = (draw(st.integers(1, max_batch)),) * world_size
        steps = draw(st.integers(1, max_steps))
        optimizer = draw(specs)
        bucket_view = draw(st.booleans())
        # From here on, a fixed number of choices whatever the model and the steps (values out of
        # range are clamped), so that a layer or a step shrinking away shifts no later choice.
        num_params = sum(2 if bias else 1 for _, _, bias in layers)
        raw = [draw(st.integers(0, MAX_GROUPS - 1)) for _ in range(2 * MAX_LAYERS)][:num_params]
        order: dict[int, int] = {}
        groups = tuple(order.setdefault(g, len(order)) for g in raw)  # numbered by first appearance
        num_groups = len(order)
        initial_groups = max(1, num_groups - draw(st.integers(0, MAX_GROUPS - 1)))
        add_step = min(draw(st.integers(0, max_steps - 1)), steps - 1)
        add_step = add_step if initial_groups < num_groups else 0
        group_lrs = tuple(draw(st.sampled_from([None, 0.05, 0.2])) for _ in range(MAX_GROUPS))[:num_groups]
        reload_drawn = draw(st.booleans())
        reload_step = draw(st.integers(0, max(0, max_steps - 2)))
        reload_to = draw(st.integers(0, world_size - 1))
        reload = (min(reload_step, steps - 2), reload_to) if reload_drawn and steps > 1 else None
        overlap_with_ddp = draw(st.booleans()) and overlap and num_groups == 1
        return ZeroCase(
            layers=tuple(layers),
            batch_sizes=batch_sizes,
            steps=steps,
            optimizer=optimizer,
            bucket_view=bucket_view,
            groups=groups,
            initial_groups=initial_groups,
            add_step=add_step,
            group_lrs=group_lrs,
            reload=reload,
            overlap_with_ddp=overlap_with_ddp,
        )

    return draw()


# ---------------------------------------------------------------------------
# the reference


def local_gradients(
    reference: nn.Module, case: ZeroCase, step: int, seed: int, dtype: torch.dtype
) -> list[dict[str, torch.Tensor | None]]:
    """Each rank's local gradient at ``step`` (of the mean squared error over its own batch), from
    one local model with no communication."""
    out = []
    for r in range(case.world_size):
        reference.zero_grad(set_to_none=True)
        x, y = case.make_batch(r, step, seed, dtype)
        nn.functional.mse_loss(reference(x), y).backward()
        out.append({n: None if p.grad is None else p.grad.detach().clone() for n, p in reference.named_parameters()})
    reference.zero_grad(set_to_none=True)
    return out


def expected_gradient(
    local: Sequence[torch.Tensor | None],
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(the exact float64 mean of the ranks' gradients, the per-element rounding bound of DDP's
    divide-then-all-reduce in ``dtype``: see the module docstring); None if no rank has one."""
    present = [g.double() for g in local if g is not None]
    if not present:
        return None
    world = len(local)
    mean = torch.stack(present).sum(0) / world
    magnitude = torch.stack([g.abs() for g in present]).sum(0) / world
    info = torch.finfo(dtype)
    return mean, (world + 1) * info.eps * magnitude + info.eps * info.smallest_normal


def close_problem(what: str, actual: torch.Tensor, expected: torch.Tensor) -> Problem | None:
    """None if ``actual`` is within ``2 * eps * |expected| + smallest_normal`` of ``expected`` (see the
    module docstring), else the first difference."""
    info = torch.finfo(actual.dtype) if actual.is_floating_point() else None
    rtol, atol = (PARAM_EPS * info.eps, info.smallest_normal) if info is not None else (0.0, 0.0)
    return tolerance_problem(what, actual.detach(), expected.detach(), rtol, atol)


def state_dict_problems(actual: dict[str, Any], expected: dict[str, Any]) -> list[Problem]:
    """How the consolidated ``state_dict()`` differs from the local optimizer's: ``param_groups``
    (every option but ``params``, exactly, and the parameter indices per group) and each
    parameter's state (same keys; tensors within tolerance, other values equal)."""
    problems: list[Problem] = []
    a_groups, e_groups = actual.get("param_groups", []), expected["param_groups"]
    if len(a_groups) != len(e_groups):
        return [Problem(Kind.MISMATCH, "state_dict: param_groups", got=len(a_groups), expected=len(e_groups))]
    for g, (a, e) in enumerate(zip(a_groups, e_groups, strict=True)):
        if list(a["params"]) != list(e["params"]):
            problems.append(
                Problem(Kind.MISMATCH, f"state_dict param_groups[{g}]['params']", got=a["params"], expected=e["params"])
            )
        for key in sorted(set(a) | set(e)):
            if key != "params" and a.get(key) != e.get(key):
                problems.append(
                    Problem(
                        Kind.MISMATCH, f"state_dict param_groups[{g}][{key!r}]", got=a.get(key), expected=e.get(key)
                    )
                )
    a_state, e_state = actual.get("state", {}), expected["state"]
    if sorted(a_state) != sorted(e_state):
        problems.append(
            Problem(
                Kind.MISMATCH, "state_dict: the parameters with state", got=sorted(a_state), expected=sorted(e_state)
            )
        )
    for index in sorted(set(a_state) & set(e_state)):
        a, e = a_state[index], e_state[index]
        if not isinstance(a, dict) or sorted(a) != sorted(e):
            problems.append(
                Problem(Kind.MISMATCH, f"state_dict state[{index}]", got=f"{a!r:.80}", expected=f"keys {sorted(e)}")
            )
            continue
        for key in sorted(e):
            if isinstance(e[key], torch.Tensor) and isinstance(a[key], torch.Tensor):
                problem = close_problem(f"state_dict state[{index}][{key!r}]", a[key].cpu(), e[key].cpu())
                if problem is not None:
                    problems.append(problem)
            elif a[key] != e[key]:
                problems.append(
                    Problem(Kind.MISMATCH, f"state_dict state[{index}][{key!r}]", got=a[key], expected=e[key])
                )
    return problems


# ---------------------------------------------------------------------------
# on the ranks


def _build_zero(
    case: ZeroCase,
    params: Sequence[nn.Parameter],
    upto: int,
    group: Any,
    optimizer_class: type[Any],
    overlap_with_ddp: bool = False,
) -> Any:
    """A ZeRO optimizer over groups ``0 .. upto - 1`` of ``params``, as ``case`` says."""
    return optimizer_class(
        case.param_groups(params, upto),
        optimizer_class=case.optimizer.optimizer_class,
        process_group=group,
        # ignored with overlap_with_ddp (its docs), where ZeRO logs a warning about it
        parameters_as_bucket_view=case.bucket_view and not overlap_with_ddp,
        overlap_with_ddp=overlap_with_ddp,
        **case.optimizer.kwargs(),
    )


def overlap_refusal(
    ctx: RankContext, case: ZeroCase, seed: int, dtype: torch.dtype, optimizer_class: type[Any]
) -> list[Problem]:
    """On gloo: ZeRO takes ``overlap_with_ddp=True``, and both DDP-ZeRO hooks refuse gloo at once
    with a ``RuntimeError``, as their docs say.  Returns the problems."""
    from torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import (
        hook_with_zero_step,
        hook_with_zero_step_interleaved,
    )
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    if dist.get_backend(ctx.group) != "gloo":
        raise InvalidArgument(
            "overlap_with_ddp is checked here only as its documented refusal on gloo; "
            "draw with zero_cases(..., overlap=False) on other backends"
        )
    model = case.build_model(seed, dtype)
    ddp = DDP(model, process_group=ctx.group)
    zero = _build_zero(case, list(ddp.parameters()), 1, ctx.group, optimizer_class, overlap_with_ddp=True)
    problems = []
    for hook in (hook_with_zero_step, hook_with_zero_step_interleaved):
        try:
            hook(allreduce_hook, ddp, zero)
        except RuntimeError as exc:
            # a clear refusal names gloo (torch 2.13: "Gloo backend using Overlapping DDP with ZeRO may meet
            # hangs") or the backends it needs (torch 2.6: "... currently requires NCCL/HCCL backend ...")
            if not any(name in str(exc).lower() for name in ("gloo", "nccl")):
                problems.append(
                    Problem.raised(
                        exc, f"{hook.__name__} on gloo", detail="(naming neither gloo nor the backend it needs)"
                    )
                )
        except Exception as exc:  # noqa: BLE001 - any other type is the finding
            problems.append(Problem.raised(exc, f"{hook.__name__} on gloo", detail="(documented: RuntimeError)"))
        else:
            problems.append(
                Problem(
                    Kind.MISSING,
                    f"{hook.__name__} on gloo",
                    detail=("accepted a gloo DDP, documented: RuntimeError (gloo may hang)"),
                )
            )
    return problems


def zero_parity(
    ctx: RankContext,
    case: ZeroCase,
    seed: int,
    dtype: torch.dtype,
    optimizer_class: type[Any] = ZeroRedundancyOptimizer,
) -> dict[str, Any]:
    """On every rank: train ``case``'s model under DDP with ``optimizer_class`` (ZeRO's interface)
    next to a local reference, checking every step (see the module docstring); return the problems
    and the digests of the gradients and parameters."""
    if case.world_size != ctx.world_size:
        raise InvalidArgument(
            f"the case is for {case.world_size} ranks; this pool has {ctx.world_size}: "
            f"draw it with zero_cases({ctx.world_size})"
        )
    if case.overlap_with_ddp:
        return {"problems": overlap_refusal(ctx, case, seed, dtype, optimizer_class), "digests": []}
    model = case.build_model(seed, dtype)
    reference = copy.deepcopy(model)
    ddp = DDP(model, process_group=ctx.group)
    params = list(model.parameters())
    names = [n for n, _ in model.named_parameters()]
    ref_params = list(reference.parameters())
    zero = _build_zero(case, params, case.initial_groups, ctx.group, optimizer_class)
    ref_opt = case.optimizer.optimizer_class(
        case.param_groups(ref_params, case.initial_groups), **case.optimizer.kwargs()
    )
    added = case.initial_groups == case.num_groups
    problems: list[Problem] = []
    digests: list[Digest] = []
    for step in range(case.steps):
        if not added and step == case.add_step:
            for group in case.param_groups(params, case.num_groups)[case.initial_groups :]:
                zero.add_param_group(group)
            for group in case.param_groups(ref_params, case.num_groups)[case.initial_groups :]:
                ref_opt.add_param_group(group)
            added = True
        local = local_gradients(reference, case, step, seed, dtype)
        x, y = case.make_batch(ctx.rank, step, seed, dtype)
        nn.functional.mse_loss(ddp(x), y).backward()
        grads = {n: None if p.grad is None else p.grad.detach().clone() for n, p in zip(names, params, strict=True)}
        digests.append(digest(grads))
        for name, ref_p in zip(names, ref_params, strict=True):
            problem = gradient_problem(
                f"step {step}: grad {name}", grads[name], expected_gradient([g[name] for g in local], dtype)
            )
            if problem is not None:
                problems.append(problem)
            ref_p.grad = grads[name]  # checked: the reference steps from the same gradients
        zero.step()
        ref_opt.step()
        zero.zero_grad(set_to_none=True)
        model.zero_grad(set_to_none=True)  # also the parameters of groups not added yet
        ref_opt.zero_grad(set_to_none=True)
        after = {n: p.detach().clone() for n, p in zip(names, params, strict=True)}
        digests.append(digest(dict(after)))
        with torch.no_grad():
            for name, ref_p in zip(names, ref_params, strict=True):
                problem = close_problem(f"after step {step}: param {name}", after[name], ref_p)
                if problem is not None:
                    problems.append(problem)
                ref_p.copy_(after[name])  # checked: the next step starts from the same values
        if case.reload is not None and case.reload[0] == step:
            zero, reload_problems = _reload(ctx, case, zero, ref_opt, params, optimizer_class)
            problems.extend(reload_problems)
    return {"problems": capped(problems), "digests": digests}


def _reload(
    ctx: RankContext,
    case: ZeroCase,
    zero: Any,
    ref_opt: torch.optim.Optimizer,
    params: Sequence[nn.Parameter],
    optimizer_class: type[Any],
) -> tuple[Any, list[Problem]]:
    """Consolidate ``zero``'s state on ``case.reload[1]``, check it there against the reference
    optimizer's, hand it over through a file (a checkpoint) and return a fresh optimizer, built with
    the same groups, that loaded it; and the problems."""
    to = case.reload[1] if case.reload is not None else 0
    zero.consolidate_state_dict(to=to)
    path = os.path.join(ctx.tmpdir, f"zero-state-{ctx.example}.pt")
    problems: list[Problem] = []
    if ctx.rank == to:
        state = zero.state_dict()
        problems.extend(
            p.about(f"consolidated on rank {to}: {p.what}")
            for p in state_dict_problems(copy.deepcopy(state), ref_opt.state_dict())
        )
        torch.save(state, path)
    dist.barrier(group=ctx.group)
    state = torch.load(path, weights_only=True)
    dist.barrier(group=ctx.group)  # everyone has read it
    if ctx.rank == to:
        os.unlink(path)
    fresh = _build_zero(case, params, case.initial_groups, ctx.group, optimizer_class)
    for group in case.param_groups(params, len(zero.param_groups))[case.initial_groups :]:
        fresh.add_param_group(group)
    fresh.load_state_dict(state)
    return fresh, problems


# ---------------------------------------------------------------------------
# the driver-side check


def check_results(results: list[dict[str, Any]]) -> None:
    """Raise :class:`PropertyFailure` if any rank reported a problem, or the ranks' gradients or
    parameters are not bitwise equal."""
    fail_on_reported_problems(results, "ZeRO differs from the local optimizer")
    disagreement = first_disagreement(results)
    if disagreement is not None:
        rank, at = disagreement
        raise PropertyFailure(
            f"rank {rank} differs from rank 0, bitwise, at step {at // 2}'s "
            f"{'gradients' if at % 2 == 0 else 'parameters'}",
            results,
        )


def check(
    pool: Pool,
    case: ZeroCase,
    seed: int,
    dtype: torch.dtype = torch.float32,
    *,
    optimizer_class: type[Any] = ZeroRedundancyOptimizer,
) -> None:
    """Train ``case`` under DDP with ``optimizer_class`` (``ZeroRedundancyOptimizer`` or a class
    with its interface, importable on the ranks) on every rank of ``pool``, next to a local
    optimizer; raise :class:`PropertyFailure` if gradients, parameters or the consolidated state
    differ from the reference's, or across ranks."""
    results = pool.run(zero_parity, case, seed, dtype, optimizer_class=optimizer_class)
    check_results(results)
