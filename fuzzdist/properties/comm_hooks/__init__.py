"""DDP communication hooks and gradient accumulation: what each hook's documentation promises.

Every case trains a ``fst.DDPConfig`` model under DistributedDataParallel with a hook registered
(``DistributedDataParallel.register_comm_hook``) next to a local reference computed with no
communication: each rank's *local* gradient ``g_r`` (the gradient of its mean loss on its own
batch, from a copy of the model, see ``local_gradients``).  Configs come from ``fst.ddp_configs``
without buffers (``hook_configs``): buffers are DDP parity's subject (``fuzzdist.properties.ddp``);
here every rank's forward is the reference's.  Every step also checks that the synced gradients,
and the parameters at the end, are bitwise equal on every rank (except where post-local SGD lets
ranks differ, see below).

Sub-families, each with its contract and the doc lines it comes from:

* **allreduce** (``default_hooks.allreduce_hook``): "If user registers this DDP communication hook,
  DDP results is expected to be same as the case where no hook was registered."  Checked
  against a twin DDP without a hook on the same data, every step: *bitwise* where the world size
  is a power of two (scaling by 1/W is then exact whichever way it is done), else within
  ``torch.testing``'s tolerance: seen on torch 2.13, at 3 ranks the hook's gradients differ from
  DDP's own in the last bit, so "same" is read as "same up to the rounding of the 1/W scaling",
  and the twin starts each step from the hooked model's weights (those last bits would otherwise
  grow through the optimizer: Adam makes a whole step of a near-zero gradient's sign).  Also
  within ``torch.testing``'s tolerance of the exact mean ``(1/W) sum_r g_r``.
* **fp16 / bf16** (``fp16_compress_hook``, ``bf16_compress_hook``, ``fp16_compress_wrapper`` and
  ``bf16_compress_wrapper`` of ``allreduce_hook``): "casts GradBucket tensor to half-precision
  ... and then divides it by the process group size.  It allreduces those float16 gradient
  tensors ... casts it back to the input data type"; "fp16_compress_hook is equivalent to
  fp16_compress_wrapper(allreduce_hook)".  So each element is ``sum_r round(round(g_r) / W)`` in
  the half type: one rounding of the cast, one of the division and W - 1 of the sum, each within
  the half type's unit roundoff ``u`` (2^-11 for float16, 2^-8 for bfloat16) of the terms, plus
  half a subnormal spacing each near zero: ``|G - mean| <= (W + 2) u mean_r|g_r| + 3W *
  spacing``.  Overflow, read from the same lines: a ``g_r`` whose cast to float16 is infinite
  makes the element infinite with that sign (NaN if ranks overflow to opposite signs), as the
  cast-then-divide order implies.  The loss is scaled by a drawn power of two up to 2^24 (loss
  scaling, as under AMP), so gradients reach float16's range; a step whose synced gradient is not
  finite is skipped and the others are unscaled before the optimizer step, as ``GradScaler`` does.
  bfloat16 has float32's range: its overflow needs float32 values within 2^-8 of float32's maximum
  and is not drawn.  The bf16 hooks are not drawn on CPU: both docstrings say they require NCCL
  ("requires NCCL version later than 2.9.6"), and DDP refuses ``bf16_compress_hook`` without it;
  ``compression_cases(..., hooks=tuple(COMPRESSION_HOOKS))`` draws them for an nccl pool.
* **PowerSGD** (``powerSGD_hook.PowerSGDState``, ``powerSGD_hook``, ``batched_powerSGD_hook``):
  "this communication hook enforces vanilla allreduce for the first start_powerSGD_iter
  iterations": before it, gradients equal a twin DDP without a hook (as for allreduce_hook).  "If the specified
  compression rate threshold cannot be satisfied, the tensor will be directly allreduced without
  compression" (the test is ``(n + m) * min(n, m, rank) * min_compression_rate < n * m`` for the
  gradient viewed as ``n x m = shape[0] x rest``, from ``_should_compress``): those tensors get
  the mean of the ranks' inputs.  A compressed tensor with ``matrix_approximation_rank`` at
  least ``m <= n`` is approximated by ``P P^T M`` with ``P`` an orthonormal basis of ``M Q``, ``Q``
  square: no approximation, so the mean again, within a bound that grows with the condition
  number of the summed matrix (Gram-Schmidt's and QR's loss of orthogonality, ``eps * kappa``) and
  ``orthogonalization_epsilon / sigma_min`` (the epsilon added to every column norm).  With warm
  start, ``Q`` is the previous step's ``M^T P`` ("reuse Qs from the previous iteration"), square
  but invertible only while every earlier compressed ``M`` of that tensor was: after a singular or
  ill-conditioned one (an all-zero gradient behind a dead ReLU) power iteration can't regain the
  lost directions, and that tensor gets no value check from then on.  Summed
  matrices with ``kappa > 1e3`` and wide ones (``m > n``, whose ``Q`` is a random projection no
  local reference knows) get no value check.  ``batched_powerSGD_hook`` views the whole bucket as
  one zero-padded square matrix of side ``s``; with rank ``s`` it is the mean the same way.
  Error feedback, read from the paper the docstring cites: the error a rank carries to the next
  step is its input (local gradient plus the error carried in) minus what the hook returned, so
  the *means* above are of ``g_r + e_r``, and each rank's new error is checked against that
  recurrence (the errors differ across ranks by design).  Warm start: the low-rank ``P`` and
  ``Q`` the state keeps are bitwise equal on every rank.  Inputs the docs forbid are not drawn:
  ``start_powerSGD_iter <= 1`` with error feedback or warm start (``ValueError``), and
  ``orthogonalization_epsilon=0`` where a column can be all zeros ("to prevent div-by-zero error
  if any column has all 0s": deeper layers behind a ReLU, unused parameters).
* **post-local SGD** (``post_localSGD_hook``, ``PostLocalSGDState``,
  ``averagers.PeriodicModelAverager``, ``PostLocalSGDOptimizer``): "In the first 100 steps, run
  global gradient averaging like normal DDP at every step.  After 100 steps, run model averaging
  every 4 steps" with "warmup_steps must be the same as start_localSGD_iter".  The reference
  simulates the W replicas locally: before ``start_localSGD_iter`` every replica steps with the
  mean gradient; after it, with its own gradient (``post_local_gradient_allreduce=False``) or the
  subgroup's mean (``True``, the subgroup being the whole group), and at steps ``t >= warmup``
  with ``(t - warmup) % period == 0`` the parameters become their mean over replicas.  Each rank's
  parameters must equal its replica's after every step, and be bitwise equal across ranks after
  every step where the replicas are equal.  SGD only: the check compares trajectories, not single
  steps, and Adam's normalisation amplifies last-bit differences of near-zero gradients.
* **no_sync** (``DistributedDataParallel.no_sync``): "gradients will be accumulated on module
  variables, which will later be synchronized in the first forward-backward pass exiting the
  context".  ``config.steps - 1`` micro-batches inside ``no_sync``, then one synced backward: inside,
  each rank's gradients are the sum of its own local gradients; after, they equal the gradient of
  one backward over *all* ranks' micro-batches concatenated, each element weighted by ``1/(W *
  b_r * out_features)`` (rank r's mean losses, summed over micro-batches, averaged over ranks).
* **reordered**: the allreduce and fp16 hooks over a ``ReorderingProcessGroup`` that completes
  their futures in a drawn order (``completion_schedules``, ``pg_wrapper`` of
  ``fuzzdist.properties.ddp``): the same contracts must hold.

The implementation under test is a keyword of each ``check_*``: ``hook=`` (a picklable hook
callable), ``state_factory=`` (``PowerSGDState``, ``PostLocalSGDState``), ``averager_factory=``,
``optimizer_factory=``, ``no_sync=``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, post_localSGD_hook, powerSGD_hook
from torch.distributed.algorithms.model_averaging import averagers
from torch.distributed.optim import PostLocalSGDOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem, Symptom, by_rank, listed
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties.ddp import TOLERANCES, completion_schedules, ddp_device_kwargs, pg_wrapper
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import Digest, digest, fingerprint, mismatch
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

__all__ = [
    "COMPRESSION_HOOKS", "CompressionCase", "LocalSGDCase", "PowerSGDCase", "check_compression", "check_local_sgd",
    "check_no_sync", "check_powersgd", "completion_schedules", "compression_cases", "hook_configs",
    "local_sgd_cases", "powersgd_cases",
]

SEEDS = seeds()
DTYPES = st.sampled_from([torch.float32, torch.float64])
REORDER_KINDS = ("reorder-subclass", "reorder-future")
_KAPPA_LIMIT = 1e3  # summed PowerSGD matrices worse conditioned than this get no value check
Tensors = dict[str, torch.Tensor | None]


# ---------------------------------------------------------------------------
# hooks by name (picklable: the ranks import them)


def fp16_wrapped_allreduce_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """``fp16_compress_wrapper(allreduce_hook)``, as a top-level (picklable) hook."""
    return default_hooks.fp16_compress_wrapper(default_hooks.allreduce_hook)(state, bucket)


def bf16_wrapped_allreduce_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """``bf16_compress_wrapper(allreduce_hook)``, as a top-level (picklable) hook."""
    return default_hooks.bf16_compress_wrapper(default_hooks.allreduce_hook)(state, bucket)


def _annotate(hook: Callable[..., Any]) -> None:
    """Give ``hook`` the evaluated annotations ``register_comm_hook`` checks (this module's are strings)."""
    hook.__annotations__ = {"state": Any, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


_annotate(fp16_wrapped_allreduce_hook)
_annotate(bf16_wrapped_allreduce_hook)

# name -> (hook, the half type it communicates in, or None for full precision)
COMPRESSION_HOOKS: dict[str, tuple[Callable[..., Any], torch.dtype | None]] = {
    "allreduce": (default_hooks.allreduce_hook, None),
    "fp16": (default_hooks.fp16_compress_hook, torch.float16),
    "fp16_wrapper": (fp16_wrapped_allreduce_hook, torch.float16),
}
# Drawn by default: bf16 "requires NCCL version later than 2.9.6" (both bf16 docstrings), and DDP
# refuses bf16_compress_hook without NCCL, so the bf16 hooks are left to a pool whose group is nccl
# (``compression_cases(..., hooks=tuple(COMPRESSION_HOOKS))``).
CPU_HOOKS: tuple[str, ...] = tuple(COMPRESSION_HOOKS)
if hasattr(default_hooks, "bf16_compress_hook"):
    COMPRESSION_HOOKS["bf16"] = (default_hooks.bf16_compress_hook, torch.bfloat16)
    COMPRESSION_HOOKS["bf16_wrapper"] = (bf16_wrapped_allreduce_hook, torch.bfloat16)


# ---------------------------------------------------------------------------
# strategies


def hook_configs(world_size: int, *, max_depth: int = 2, max_width: int = 6, max_batch: int = 4,
                 max_steps: int = 3, optimizers: None | str | Iterable[str] = None) -> st.SearchStrategy[fst.DDPConfig]:
    """``fst.ddp_configs`` (every DDP option it draws) without buffers, small: the hooks' subject is
    gradients, and buffers are DDP parity's.  Shrinks like ``ddp_configs``: a 1->1 model, batch 1,
    DDP defaults, one SGD step."""
    return fst.ddp_configs(world_size, max_depth=max_depth, max_width=max_width, max_batch=max_batch,
                           max_steps=max_steps, optimizers=optimizers).map(
        lambda c: dataclasses.replace(c, buffers=False, broadcast_buffers=True))


@dataclass(frozen=True)
class CompressionCase:
    """A DDP config trained with the allreduce or a half-precision hook (``COMPRESSION_HOOKS``),
    its loss scaled by ``2 ** scale_exp``."""

    config: fst.DDPConfig
    hook: str = "allreduce"
    scale_exp: int = 0


def compression_cases(world_size: int, *, hooks: Iterable[str] | None = None,
                      max_scale_exp: int = 24) -> st.SearchStrategy[CompressionCase]:
    """Covers the hooks of ``CPU_HOOKS`` (or ``hooks``, any of ``COMPRESSION_HOOKS``) on ``hook_configs`` with the loss
    scaled by 2^0 .. 2^max_scale_exp: float16 overflows for the larger scales.  Shrinks to the
    first hook, scale 1 and ``hook_configs``' minimum."""
    names = CPU_HOOKS if hooks is None else tuple(hooks)
    if not names or any(n not in COMPRESSION_HOOKS for n in names):
        raise InvalidArgument(f"hooks must be a non-empty subset of {tuple(COMPRESSION_HOOKS)}, got {names!r}")
    return st.builds(CompressionCase, config=hook_configs(world_size), hook=st.sampled_from(names),
                     scale_exp=st.integers(0, max_scale_exp))


@dataclass(frozen=True)
class PowerSGDCase:
    """A DDP config trained with ``powerSGD_hook`` (or ``batched_powerSGD_hook`` if ``batched``) and
    a ``PowerSGDState`` of these hyperparameters."""

    config: fst.DDPConfig
    batched: bool = False
    rank: int = 1
    start_iter: int = 0
    min_compression_rate: float = 2.0
    error_feedback: bool = False
    warm_start: bool = False
    epsilon: float = 0.0

    def state_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``PowerSGDState`` (all but the process group)."""
        return {"matrix_approximation_rank": self.rank, "start_powerSGD_iter": self.start_iter,
                "min_compression_rate": self.min_compression_rate, "use_error_feedback": self.error_feedback,
                "warm_start": self.warm_start, "orthogonalization_epsilon": self.epsilon}


def _zero_columns_possible(config: fst.DDPConfig) -> bool:
    """Whether a gradient matrix can have an all-zero column: a layer behind a ReLU (dead units) or
    a parameter that no forward uses."""
    return config.depth > 1 or config.tied_parameters or config.unused_parameters


def powersgd_cases(world_size: int, *, max_rank: int = 8, max_steps: int = 5) -> st.SearchStrategy[PowerSGDCase]:
    """Covers both PowerSGD hooks (``batched_powerSGD_hook`` fails on torch 2.13 once compression
    starts: the known bug ``batched-powersgd-orthogonalize-asserts``); ranks 1..``max_rank`` (below,
    at and above the matrices' dimensions); ``start_powerSGD_iter`` 0..3 (at least 2 with error feedback or warm
    start, as the docs require) and up to ``max_steps`` steps, so steps before and after it;
    ``min_compression_rate`` 0, 0.5 (the docstring's example) or 2 (the default), so tensors both
    compressed and allreduced; error feedback and warm start on and off; ``orthogonalization_epsilon``
    0 or 1e-8 (1e-8 wherever a column can be all zeros).  SGD only.  Shrinks to ``powerSGD_hook``,
    rank 1, start 0, rate 0, neither error feedback nor warm start, and the smallest model."""

    @st.composite
    def draw(draw: st.DrawFn) -> PowerSGDCase:
        config = draw(hook_configs(world_size, max_steps=max_steps, optimizers="sgd"))
        batched = draw(st.booleans())
        rank = draw(st.integers(1, max_rank))
        error_feedback = draw(st.booleans())
        warm_start = draw(st.booleans())
        start = draw(st.integers(0, 3))
        if (error_feedback or warm_start) and start < 2:
            start = 2
        rate = draw(st.sampled_from([0.0, 0.5, 2.0]))
        epsilon = draw(st.sampled_from([0.0, 1e-8]))
        if _zero_columns_possible(config):
            epsilon = 1e-8
        return PowerSGDCase(config, batched, rank, start, rate, error_feedback, warm_start, epsilon)

    return draw()


@dataclass(frozen=True)
class LocalSGDCase:
    """A DDP config trained with ``post_localSGD_hook`` and a ``PeriodicModelAverager``."""

    config: fst.DDPConfig
    start_iter: int = 0
    period: int = 1
    post_local_allreduce: bool = False
    optimizer_wrapper: bool = False


def local_sgd_cases(world_size: int, *, max_steps: int = 6, max_period: int = 3) -> st.SearchStrategy[LocalSGDCase]:
    """Covers ``start_localSGD_iter`` (= the averager's ``warmup_steps``, as the docs require) 0..3,
    periods 1..``max_period`` (period 1 warns: recommended against, not forbidden), gradients after
    the start local (``post_local_gradient_allreduce=False``) or averaged over the subgroup (the
    whole group), the averager called directly or through ``PostLocalSGDOptimizer``; up to
    ``max_steps`` SGD steps.  Shrinks to start 0, period 1, local gradients, the direct averager,
    one step of the smallest model."""
    return st.builds(LocalSGDCase, config=hook_configs(world_size, max_steps=max_steps, optimizers="sgd"),
                     start_iter=st.integers(0, 3), period=st.integers(1, max_period),
                     post_local_allreduce=st.booleans(), optimizer_wrapper=st.booleans())


def no_sync_configs(world_size: int, *, max_micro_batches: int = 3) -> st.SearchStrategy[fst.DDPConfig]:
    """``hook_configs`` whose ``steps`` is the number of micro-batches plus the synced one: 1 to
    ``max_micro_batches + 1``.  Shrinks to no micro-batch (one plain synced backward)."""
    return hook_configs(world_size, max_steps=max_micro_batches + 1)


# ---------------------------------------------------------------------------
# the reference (no communication)


def local_gradients(reference: nn.Module, config: fst.DDPConfig, step: int, seed: int, dtype: torch.dtype,
                    scale: float = 1.0) -> list[Tensors]:
    """Each rank's local gradient at ``step``: of ``scale`` times its mean squared error on its own
    batch, from ``reference`` (left with no gradients).  A parameter a rank doesn't use gets None."""
    out = []
    for r in range(config.world_size):
        reference.zero_grad(set_to_none=True)
        inputs, targets = config.make_batch(r, step, seed)
        (nn.functional.mse_loss(reference(inputs.to(dtype)), targets.to(dtype)) * scale).backward()
        out.append({name: None if p.grad is None else p.grad.detach().clone()
                    for name, p in reference.named_parameters()})
    reference.zero_grad(set_to_none=True)
    return out


def _dense(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like, dtype=torch.float64) if t is None else t.double()


def half_expected(local: list[torch.Tensor | None], half: torch.dtype, like: torch.Tensor,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(the exact float64 mean of ``local``, where a term's cast to ``half`` overflows: that
    infinity, NaN if of both signs; the rounding bound of the module docstring) per element."""
    terms = [_dense(g, like) for g in local]
    world = len(terms)
    stacked = torch.stack(terms)
    mean = stacked.sum(0) / world
    cast = stacked.to(half).double()
    pos, neg = (cast == math.inf).any(0), (cast == -math.inf).any(0)
    mean = torch.where(pos, math.inf, mean)
    mean = torch.where(neg, -math.inf, mean)
    mean = torch.where(pos & neg, math.nan, mean)
    info = torch.finfo(half)
    u = info.eps / 2
    spacing = info.smallest_normal * info.eps
    bound = (world + 2) * u * stacked.abs().sum(0) / world + 3 * world * spacing
    return mean, bound


def mean_problem(what: str, actual: torch.Tensor | None, mean: torch.Tensor, bound: torch.Tensor | float,
                 ) -> Problem | None:
    """None if every element of ``actual`` (None = zeros) is within ``bound`` of ``mean`` (infinities
    and NaNs must match exactly), else the first difference."""
    a = torch.zeros_like(mean) if actual is None else actual.detach().double()
    if a.shape != mean.shape:
        return Problem(Kind.SHAPE, what, got=tuple(a.shape), expected=tuple(mean.shape))
    bound_t = torch.as_tensor(bound, dtype=torch.float64).expand_as(mean)
    finite = torch.isfinite(mean)
    ok = torch.where(finite, (a - mean).abs() <= bound_t,
                     (a == mean) | (torch.isnan(a) & torch.isnan(mean)))
    return mismatch(what, a, mean, ~ok, bound_t)


def _close_bound(terms: list[torch.Tensor], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(the float64 mean of ``terms``, ``torch.testing``'s tolerance of ``dtype`` widened to the
    rounding of W terms: ``rtol * W * mean|t| + atol``)."""
    stacked = torch.stack([t.double() for t in terms])
    rtol, atol = TOLERANCES[dtype]
    world = len(terms)
    return stacked.mean(0), rtol * world * stacked.abs().mean(0) + atol


def _grads(model: nn.Module) -> Tensors:
    return {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}


def _sync_reference(reference: nn.Module, model: nn.Module) -> None:
    with torch.no_grad():
        for (_, r), (_, p) in zip(reference.named_parameters(), model.named_parameters(), strict=True):
            r.copy_(p)


def _loss(ddp: nn.Module, config: fst.DDPConfig, rank: int, step: int, seed: int, dtype: torch.dtype,
          device: torch.device, scale: float = 1.0) -> torch.Tensor:
    inputs, targets = config.make_batch(rank, step, seed)
    return nn.functional.mse_loss(ddp(inputs.to(device, dtype)), targets.to(device, dtype)) * scale


def _ddp(model: nn.Module, pg: Any, ctx: RankContext, config: fst.DDPConfig) -> DDP:
    with warnings.catch_warnings():
        # Expected: static_graph with find_unused_parameters is a valid drawn pairing (see ddp.py).
        warnings.filterwarnings("ignore", message="You passed find_unused_parameters=true", category=UserWarning)
        return DDP(model, process_group=pg, **ddp_device_kwargs(ctx.device), **config.ddp_kwargs())


def _check_world(config: fst.DDPConfig, ctx: RankContext) -> None:
    if config.world_size != ctx.world_size:
        raise InvalidArgument(f"the config is for {config.world_size} ranks; this pool has {ctx.world_size}: "
                              f"draw it with the strategy's world_size={ctx.world_size}")


def _wrapped(ctx: RankContext, pg_kind: str, schedule: fst.CompletionOrder | None) -> Any:
    kwargs = pg_wrapper(pg_kind, schedule)
    if not kwargs:
        return ctx.group
    return kwargs["wrap"](ctx.group, *kwargs["wrap_args"], **kwargs["wrap_kwargs"])


# ---------------------------------------------------------------------------
# allreduce and half-precision hooks (and their reordered variant)


def compressed_training(ctx: RankContext, case: CompressionCase, dtype: torch.dtype, seed: int,
                        hook: Callable[..., Any] | None = None, pg_kind: str = "gloo",
                        schedule: fst.CompletionOrder | None = None) -> dict[str, Any]:
    """On every rank: train ``case`` with ``hook`` (default: the case's named hook) registered with
    the process group (the pool's, or a ``ReorderingProcessGroup`` for ``pg_kind`` "reorder-*") as
    its state; check each step's gradients (module docstring); return problems and digests."""
    config = case.config
    _check_world(config, ctx)
    if case.hook not in COMPRESSION_HOOKS:
        raise InvalidArgument(f"unknown hook {case.hook!r}; choose from {tuple(COMPRESSION_HOOKS)}")
    named, half = COMPRESSION_HOOKS[case.hook]
    hook = named if hook is None else hook
    scale = float(2 ** case.scale_exp)
    pg = _wrapped(ctx, pg_kind, schedule)
    problems: list[Problem] = []
    digests: list[Digest] = []
    try:
        model = config.build_model(seed).to(ctx.device, dtype)
        reference = copy.deepcopy(model)
        ddp = _ddp(model, pg, ctx, config)
        ddp.register_comm_hook(pg, hook)
        twin_model = copy.deepcopy(reference) if half is None else None
        twin = None if twin_model is None else _ddp(twin_model, ctx.group, ctx, config)
        optimizer = config.build_optimizer(ddp.parameters())
        twin_opt = None if twin is None else config.build_optimizer(twin.parameters())
        for step in range(config.steps):
            _sync_reference(reference, model)
            if twin_model is not None and not _exact_scale(ctx.world_size):
                # The last-bit differences the 1/W scaling allows would grow through the optimizer
                # (Adam turns a near-zero gradient's sign into a whole step): compare from equal weights.
                _sync_reference(twin_model, model)
            local = local_gradients(reference, config, step, seed, dtype, scale)
            _loss(ddp, config, ctx.rank, step, seed, dtype, ctx.device, scale).backward()
            grads = _grads(model)
            digests.append(digest(grads))
            if twin is not None and twin_model is not None:
                _loss(twin, config, ctx.rank, step, seed, dtype, ctx.device, scale).backward()
                for name, t in _grads(twin_model).items():
                    if not _same_as_vanilla(grads[name], t, ctx.world_size, dtype, [g[name] for g in local]):
                        problems.append(Problem(Kind.MISMATCH, f"step {step} grad {name}", detail=(
                            f"not equal to DDP without a hook ({_VANILLA_EQUALITY[_exact_scale(ctx.world_size)]})")))
            for name, grad in grads.items():
                terms = [g[name] for g in local]
                like = next((t for t in terms if t is not None), grad)
                if like is None:
                    continue
                if half is None:
                    mean, bound = _close_bound([_dense(t, like) for t in terms], dtype)
                else:
                    mean, bound = half_expected(terms, half, like)
                problem = mean_problem(f"step {step} grad {name}", grad, mean, bound)
                if problem is not None:
                    problems.append(problem)
            finite = all(g is None or bool(torch.isfinite(g).all()) for g in grads.values())
            if finite:  # as GradScaler does: skip a step whose gradient overflowed, else unscale and step
                for opt in (optimizer, twin_opt):
                    if opt is not None:
                        _unscale(opt, scale)
                        opt.step()
            optimizer.zero_grad(set_to_none=True)
            if twin_opt is not None:
                twin_opt.zero_grad(set_to_none=True)
        digests.append(digest(dict(model.named_parameters())))
    finally:
        if pg is not ctx.group:
            pg.close()
    return {"problems": capped(problems), "digests": digests}


def _check_agreement(results: list[dict[str, Any]], what: str) -> None:
    wrong = {rank: obs["problems"] for rank, obs in enumerate(results) if obs["problems"]}
    if wrong:
        raise PropertyFailure(f"{what} breaks its contract on ranks {sorted(wrong)}:{by_rank(wrong)}", results)
    first = results[0]["digests"]
    for rank, obs in enumerate(results):
        if obs["digests"] != first:
            at = next(i for i, (a, b) in enumerate(zip(obs["digests"], first, strict=False)) if a != b)
            raise PropertyFailure(f"{what}: rank {rank} differs from rank 0 bitwise at check #{at} "
                                  "(each step's gradients, then the final parameters)", results)


def check_compression(pool: Pool, case: CompressionCase, dtype: torch.dtype, seed: int, *,
                      hook: Callable[..., Any] | None = None, pg_kind: str = "gloo",
                      schedule: fst.CompletionOrder | None = None) -> None:
    """Train ``case`` on ``pool`` with ``hook`` (a picklable hook; default the case's named one)
    over the pool's group or, for ``pg_kind`` in ``REORDER_KINDS``, a ``ReorderingProcessGroup``
    releasing allreduces as ``schedule`` says; raise :class:`PropertyFailure` if the gradients break
    the named hook's contract or differ across ranks."""
    with known_failures("comm_hooks", case=case, dtype=dtype, seed=seed, pg_kind=pg_kind):
        results = pool.run(compressed_training, case, dtype, seed, hook=hook, pg_kind=pg_kind, schedule=schedule)
        _check_agreement(results, f"DDP with the {case.hook} hook")


# ---------------------------------------------------------------------------
# PowerSGD


def _observed(hook: Callable[..., Any], names: dict[int, str],
              ) -> tuple[Callable[..., Any], dict[int, list[str]]]:
    """``hook`` wrapped to record, per bucket index, the names of the bucket's parameters in buffer
    order (``names``: id(param) -> name); everything else passes through.  Returns (wrapper, record)."""
    layout: dict[int, list[str]] = {}

    def observed_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        layout[bucket.index()] = [names[id(p)] for p in bucket.parameters()]
        return hook(state, bucket)

    _annotate(observed_hook)
    return observed_hook, layout


def _tensors(d: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    return {k: v.detach().clone() for k, v in d.items()}


def powersgd_training(ctx: RankContext, case: PowerSGDCase, dtype: torch.dtype, seed: int,
                      hook: Callable[..., Any] | None = None,
                      state_factory: Callable[..., Any] = powerSGD_hook.PowerSGDState) -> dict[str, Any]:
    """On every rank: train ``case`` with ``hook`` (default ``powerSGD_hook`` or
    ``batched_powerSGD_hook``) and ``state_factory(group, **case.state_kwargs())`` next to a twin DDP
    without a hook; return, per step, what the driver checks (see ``check_powersgd``)."""
    config = case.config
    _check_world(config, ctx)
    if hook is None:
        hook = powerSGD_hook.batched_powerSGD_hook if case.batched else powerSGD_hook.powerSGD_hook
    model = config.build_model(seed).to(ctx.device, dtype)
    reference = copy.deepcopy(model)
    twin_model = copy.deepcopy(model)
    ddp = _ddp(model, ctx.group, ctx, config)
    twin = _ddp(twin_model, ctx.group, ctx, config)
    state = state_factory(ctx.group, **case.state_kwargs())
    observed, layout = _observed(hook, {id(p): name for name, p in model.named_parameters()})
    ddp.register_comm_hook(state, observed)
    optimizer = config.build_optimizer(ddp.parameters())
    twin_opt = config.build_optimizer(twin.parameters())
    steps: list[dict[str, Any]] = []
    for step in range(config.steps):
        _sync_reference(reference, model)
        every_local = local_gradients(reference, config, step, seed, dtype)
        local = every_local[ctx.rank]
        error_before = _tensors(getattr(state, "error_dict", {}))
        _loss(ddp, config, ctx.rank, step, seed, dtype, ctx.device).backward()
        grads = _grads(model)
        record: dict[str, Any] = {
            "grads": grads, "local": local, "error_before": error_before,
            "error_after": _tensors(getattr(state, "error_dict", {})), "layout": dict(layout),
            "low_rank": (digest({str(k): v for k, v in getattr(state, "p_memory_dict", {}).items()}),
                         digest({str(k): v for k, v in getattr(state, "q_memory_dict", {}).items()})),
            "vanilla": None,
        }
        if step < case.start_iter:
            _loss(twin, config, ctx.rank, step, seed, dtype, ctx.device).backward()
            record["vanilla"] = [name for name, t in _grads(twin_model).items()
                                 if not _same_as_vanilla(grads[name], t, ctx.world_size, dtype,
                                                         [g[name] for g in every_local])]
            twin_opt.step()
            twin_opt.zero_grad(set_to_none=True)
        steps.append(record)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {"steps": steps, "params": digest(dict(model.named_parameters())),
            "shapes": {name: tuple(p.shape) for name, p in model.named_parameters()}}


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Bitwise equality (NaNs included); None only equals None."""
    if a is None or b is None:
        return a is None and b is None
    return fingerprint(a) == fingerprint(b)


_VANILLA_EQUALITY = {True: "bitwise", False: "within tolerance"}


def _exact_scale(world: int) -> bool:
    """Whether 1/W is exact in binary (W a power of two)."""
    return world & (world - 1) == 0


def _same_as_vanilla(a: torch.Tensor | None, b: torch.Tensor | None, world: int, dtype: torch.dtype,
                     terms: Sequence[torch.Tensor | None]) -> bool:
    """A hooked gradient against DDP's own: bitwise where W is a power of two.  Otherwise the two
    round differently (seen on torch 2.13 at 3 ranks: division by W against multiplication by a
    rounded 1/W), each term and each partial sum by at most eps of the terms' magnitude, so they must
    agree within ``(W + 1) * eps * sum_r |g_r| / W`` per element (``terms``: the ranks' local
    gradients g_r), plus the dtype's tiniest spacing.  A bound on rounding alone, relative to the
    terms: a sum of large terms that cancel keeps little relative precision (a loss scaled by 2**14),
    and no lost or doubled term fits into it."""
    if _exact_scale(world) or a is None or b is None:
        return _same(a, b)
    present = [t.detach().to(a.device, torch.float64).abs() for t in terms if t is not None]
    if not present:
        return _same(a, b)
    info = torch.finfo(dtype)
    bound = (world + 1) * info.eps * (sum(present) / world) + info.smallest_normal * info.eps
    difference = (a.detach().double() - b.detach().double()).abs()
    return bool(((difference <= bound) | (a.isnan() & b.isnan())).all())


def _unscale(optimizer: torch.optim.Optimizer, scale: float) -> None:
    """Divide every gradient by the loss scale (a power of two: exact), as ``GradScaler.unscale_`` does."""
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.div_(scale)


def compressed_by_powersgd(shape: tuple[int, ...], rank: int, rate: float) -> tuple[bool, int, int]:
    """(whether ``powerSGD_hook`` compresses a gradient of ``shape``, n, m) by its documented test:
    ``(n + m) * min(n, m, rank) * min_compression_rate < n * m`` for the ``n x m`` view."""
    n = shape[0] if shape else 1
    m = math.prod(shape[1:]) if len(shape) > 1 else 1
    return (n + m) * min(n, m, rank) * rate < n * m, n, m


def _lossless_bound(summed: torch.Tensor, world: int, dtype: torch.dtype, epsilon: float) -> torch.Tensor | None:
    """The bound of the module docstring for a compressed ``n x m`` matrix (``m <= n``, rank >= m)
    whose sum over ranks is ``summed``; None where it is too ill-conditioned to check."""
    if summed.shape[1] > summed.shape[0]:
        return None
    sv = torch.linalg.svdvals(summed)
    top, low = float(sv.max()), float(sv.min())
    if top == 0 or low == 0 or top / low > _KAPPA_LIMIT:
        return None
    n, m = summed.shape
    eps = torch.finfo(dtype).eps
    scale = top / world
    return torch.full_like(summed, 10 * (n + m + world) * eps * (top / low) * scale + 4 * epsilon / low * scale
                           + 10 * torch.finfo(dtype).tiny)


def powersgd_problems(results: list[dict[str, Any]], case: PowerSGDCase, dtype: torch.dtype) -> list[Problem]:
    """Check in the driver what the ranks of ``powersgd_training`` returned (module docstring)."""
    world = len(results)
    problems: list[Problem] = []
    # Warm start reuses Q: Q_t = M_{t-1}^T P_{t-1}, square and invertible only while every earlier
    # compressed M of that tensor was (a dead ReLU's all-zero gradient makes it singular for good).
    # Only then is P P^T M the mean; a fresh Q (no warm start, or the first compressed step) is.
    q_singular: set[tuple[int, str]] = set()  # (bucket, name) whose warm-started Q may be singular
    for step in range(case.config.steps):
        recs = [r["steps"][step] for r in results]
        ref = recs[0]
        for rank, rec in enumerate(recs):
            if digest(rec["grads"]) != digest(ref["grads"]):
                problems.append(Problem(Kind.MISMATCH, f"step {step}: gradients", rank=rank,
                                        symptom=Symptom.RANKS_DIFFER))
            if rec["low_rank"] != ref["low_rank"]:
                problems.append(Problem(Kind.MISMATCH, f"step {step}: warm-start P/Q state", rank=rank,
                                        detail="differs from rank 0's bitwise"))
        if step < case.start_iter:
            for rank, rec in enumerate(recs):
                if rec["vanilla"]:
                    before = f"step {step} (before start_powerSGD_iter={case.start_iter})"
                    problems.append(Problem(Kind.MISMATCH, before, rank=rank,
                                            detail=f"{rec['vanilla']} not bitwise equal to DDP without a hook"))
            continue
        layout: dict[int, list[str]] = ref["layout"]
        grads: Tensors = ref["grads"]
        shapes: dict[str, tuple[int, ...]] = results[0]["shapes"]
        for index, names in layout.items():
            # each rank's input to the hook: local gradient plus the carried error, flat in bucket order
            flat_local = [torch.cat([_dense(rec["local"][n], torch.empty(shapes[n])).reshape(-1) for n in names])
                          for rec in recs]
            flat_grad = torch.cat([_dense(grads[n], torch.empty(shapes[n])).reshape(-1) for n in names])
            length = flat_grad.numel()
            inputs = []
            for rec, flat in zip(recs, flat_local, strict=True):
                carried = rec["error_before"].get(index) if case.error_feedback else None
                inputs.append(flat if carried is None else flat + carried.double()[:length])
            if case.error_feedback:
                for rank, (rec, inp) in enumerate(zip(recs, inputs, strict=True)):
                    after = rec["error_after"].get(index)
                    if after is None:
                        problems.append(Problem(Kind.MISSING, f"step {step} bucket {index}: error-feedback state",
                                                rank=rank))
                        continue
                    mean, bound = _close_bound([inp - flat_grad], dtype)
                    bound = bound * 4 + TOLERANCES[dtype][0] * world * (inp.abs() + flat_grad.abs())
                    p = mean_problem(f"step {step} bucket {index} rank {rank} error feedback "
                                     "(input minus returned gradient)", after.double()[:length], mean, bound)
                    if p is not None:
                        problems.append(p)
            stacked = torch.stack(inputs)
            summed = stacked.sum(0)
            magnitude = stacked.abs().sum(0)
            rtol, atol = TOLERANCES[dtype]
            if case.batched:
                side = math.ceil(math.sqrt(length))
                if case.rank >= side:
                    padded = torch.zeros(side * side, dtype=torch.float64)
                    padded[:length] = summed
                    square = _lossless_bound(padded.view(side, side), world, dtype, 0.0)
                    if square is not None:
                        p = mean_problem(f"step {step} bucket {index} (batched, rank {case.rank} >= side {side})",
                                         flat_grad, summed / world, square.reshape(-1)[:length])
                        if p is not None:
                            problems.append(p)
                continue
            offset = 0
            for name in names:
                shape = shapes[name]
                size = math.prod(shape)
                part, mag = summed[offset:offset + size], magnitude[offset:offset + size]
                got = flat_grad[offset:offset + size]
                offset += size
                compressed, n, m = compressed_by_powersgd(shape, case.rank, case.min_compression_rate)
                if not compressed:
                    p = mean_problem(f"step {step} grad {name} (not compressed)", got, part / world,
                                     rtol * world * mag / world + atol)
                elif case.rank >= min(n, m):
                    bound_or_none = _lossless_bound(part.view(n, m), world, dtype, case.epsilon)
                    if case.warm_start and bound_or_none is None:
                        q_singular.add((index, name))
                    if bound_or_none is None or (index, name) in q_singular:
                        continue
                    p = mean_problem(f"step {step} grad {name} (compressed at full rank {min(n, m)})",
                                     got, part / world, bound_or_none.reshape(-1))
                else:
                    continue  # a lossy approximation: only the state and error-feedback checks
                if p is not None:
                    problems.append(p)
    if any(r["params"] != results[0]["params"] for r in results):
        problems.append(Problem(Kind.MISMATCH, "parameters", detail="not bitwise equal on every rank"))
    return problems


def check_powersgd(pool: Pool, case: PowerSGDCase, dtype: torch.dtype, seed: int, *,
                   hook: Callable[..., Any] | None = None,
                   state_factory: Callable[..., Any] = powerSGD_hook.PowerSGDState) -> None:
    """Train ``case`` on ``pool`` with ``hook`` and ``state_factory`` (picklable); raise
    :class:`PropertyFailure` if PowerSGD breaks its documented contract (module docstring)."""
    with known_failures("comm_hooks", case=case, dtype=dtype, seed=seed):
        results = pool.run(powersgd_training, case, dtype, seed, hook=hook, state_factory=state_factory)
        problems = powersgd_problems(results, case, dtype)
        if problems:
            raise PropertyFailure(f"PowerSGD breaks its contract:{listed(capped(problems))}", results,
                                  problems=problems)


# ---------------------------------------------------------------------------
# post-local SGD


def local_sgd_reference(case: LocalSGDCase, model: nn.Module, seed: int, dtype: torch.dtype,
                        ) -> list[list[dict[str, torch.Tensor]]]:
    """The W replicas of post-local SGD simulated locally (module docstring): for every step, each
    replica's parameters after it."""
    config = case.config
    world = config.world_size
    replicas = [copy.deepcopy(model) for _ in range(world)]
    optimizers = [config.build_optimizer(r.parameters()) for r in replicas]
    history = []
    for step in range(config.steps):
        local = [local_gradients(replicas[r], config, step, seed, dtype)[r] for r in range(world)]
        synced = step < case.start_iter or case.post_local_allreduce
        for r, replica in enumerate(replicas):
            for name, p in replica.named_parameters():
                terms = [g[name] for g in local] if synced else [local[r][name]]
                present = [t for t in terms if t is not None]
                p.grad = None if not present else sum(present, torch.zeros_like(p)) / len(terms)
            optimizers[r].step()
        if step >= case.start_iter and (step - case.start_iter) % case.period == 0:
            with torch.no_grad():
                named = [dict(r.named_parameters()) for r in replicas]
                for name in named[0]:
                    if named[0][name].grad is None:
                        continue  # the averager skips parameters without a gradient
                    mean = sum((n[name].detach() / world for n in named), torch.zeros_like(named[0][name]))
                    for n in named:
                        n[name].copy_(mean)
        for o in optimizers:
            o.zero_grad(set_to_none=False)
        history.append([{name: p.detach().clone() for name, p in r.named_parameters()} for r in replicas])
    return history


def local_sgd_training(ctx: RankContext, case: LocalSGDCase, dtype: torch.dtype, seed: int,
                       hook: Callable[..., Any] = post_localSGD_hook.post_localSGD_hook,
                       state_factory: Callable[..., Any] = post_localSGD_hook.PostLocalSGDState,
                       averager_factory: Callable[..., Any] = averagers.PeriodicModelAverager,
                       optimizer_factory: Callable[..., Any] = PostLocalSGDOptimizer) -> dict[str, Any]:
    """On every rank: post-local SGD as the docs' example runs it, next to the local simulation of
    the replicas; return problems and, per step, the parameters' digest."""
    config = case.config
    _check_world(config, ctx)
    model = config.build_model(seed).to(ctx.device, dtype)
    expected = local_sgd_reference(case, copy.deepcopy(model), seed, dtype)
    ddp = _ddp(model, ctx.group, ctx, config)
    state = state_factory(process_group=ctx.group, subgroup=ctx.group if case.post_local_allreduce else None,
                          start_localSGD_iter=case.start_iter,
                          post_local_gradient_allreduce=case.post_local_allreduce)
    ddp.register_comm_hook(state, hook)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="When period is 1", category=UserWarning)
        averager = averager_factory(period=case.period, warmup_steps=case.start_iter, process_group=ctx.group)
    local_opt = config.build_optimizer(ddp.parameters())
    optimizer = optimizer_factory(optim=local_opt, averager=averager) if case.optimizer_wrapper else local_opt
    rtol, atol = TOLERANCES[dtype]
    problems: list[Problem] = []
    digests: list[Digest] = []
    for step in range(config.steps):
        optimizer.zero_grad()
        _loss(ddp, config, ctx.rank, step, seed, dtype, ctx.device).backward()
        optimizer.step()
        if not case.optimizer_wrapper:
            averager.average_parameters(ddp.parameters())
        params = {name: p.detach().clone() for name, p in model.named_parameters()}
        digests.append(digest(params))
        for name, p in params.items():
            want = expected[step][ctx.rank][name].double()
            problem = mean_problem(f"after step {step} param {name}", p, want, rtol * want.abs() + atol)
            if problem is not None:
                problems.append(problem)
    return {"problems": capped(problems), "digests": digests}


def synced_after(case: LocalSGDCase, step: int) -> bool:
    """Whether the replicas are equal after ``step``: before the start every gradient is global; after
    it, at an averaging step, or always when the gradients are averaged over the (whole) subgroup."""
    if step < case.start_iter or case.post_local_allreduce:
        return True
    return (step - case.start_iter) % case.period == 0


def check_local_sgd(pool: Pool, case: LocalSGDCase, dtype: torch.dtype, seed: int, *,
                    hook: Callable[..., Any] = post_localSGD_hook.post_localSGD_hook,
                    state_factory: Callable[..., Any] = post_localSGD_hook.PostLocalSGDState,
                    averager_factory: Callable[..., Any] = averagers.PeriodicModelAverager,
                    optimizer_factory: Callable[..., Any] = PostLocalSGDOptimizer) -> None:
    """Run post-local SGD as ``case`` says on ``pool``; raise :class:`PropertyFailure` if a rank's
    parameters leave its replica's in the local simulation, or ranks differ after a step where the
    replicas are equal."""
    with known_failures("comm_hooks", case=case, dtype=dtype, seed=seed):
        results = pool.run(local_sgd_training, case, dtype, seed, hook=hook, state_factory=state_factory,
                           averager_factory=averager_factory, optimizer_factory=optimizer_factory)
        wrong = {rank: obs["problems"] for rank, obs in enumerate(results) if obs["problems"]}
        if wrong:
            raise PropertyFailure(f"post-local SGD differs from the local simulation on ranks {sorted(wrong)}:"
                                  f"{by_rank(wrong)}", results)
        for step in range(case.config.steps):
            if synced_after(case, step) and any(r["digests"][step] != results[0]["digests"][step] for r in results):
                raise PropertyFailure(f"after step {step} the parameters should be equal on every rank "
                                      "(averaged or globally synced) but are not bitwise equal", results)


# ---------------------------------------------------------------------------
# no_sync


def concatenated_gradients(reference: nn.Module, config: fst.DDPConfig, seed: int, dtype: torch.dtype,
                           ) -> Tensors:
    """One backward over every rank's micro-batches (steps 0..config.steps-1) concatenated, element
    i of rank r's batches weighted ``1 / (W * b_r * out_features)``: accumulation's contract."""
    world, out_features = config.world_size, config.widths[-1]
    xs, ys, ws = [], [], []
    for r in range(world):
        for step in range(config.steps):
            x, y = config.make_batch(r, step, seed)
            xs.append(x)
            ys.append(y)
            ws.append(torch.full((x.shape[0], 1), 1.0 / (world * config.batch_sizes[r] * out_features)))
    reference.zero_grad(set_to_none=True)
    weights = torch.cat(ws).to(dtype)
    (((reference(torch.cat(xs).to(dtype)) - torch.cat(ys).to(dtype)) ** 2) * weights).sum().backward()
    grads = _grads(reference)
    reference.zero_grad(set_to_none=True)
    return grads


def _default_no_sync(ddp: DDP) -> Any:
    return ddp.no_sync()


def no_sync_training(ctx: RankContext, config: fst.DDPConfig, dtype: torch.dtype, seed: int,
                     no_sync: Callable[[DDP], Any] = _default_no_sync) -> dict[str, Any]:
    """On every rank: ``config.steps - 1`` backward passes inside ``no_sync(ddp)``, then a synced one;
    check both phases (module docstring); return problems and digests."""
    _check_world(config, ctx)
    model = config.build_model(seed).to(ctx.device, dtype)
    reference = copy.deepcopy(model)
    ddp = _ddp(model, ctx.group, ctx, config)
    rtol, atol = TOLERANCES[dtype]
    problems: list[Problem] = []
    micro = config.steps - 1
    every = [local_gradients(reference, config, k, seed, dtype) for k in range(config.steps)]
    accumulated = [every[k][ctx.rank] for k in range(micro)]
    whole = concatenated_gradients(reference, config, seed, dtype)
    with no_sync(ddp):
        for k in range(micro):
            _loss(ddp, config, ctx.rank, k, seed, dtype, ctx.device).backward()
    for name, grad in _grads(model).items():
        terms = [t for a in accumulated if (t := a[name]) is not None]
        if not terms and grad is None:
            continue
        like = terms[0] if terms else grad
        assert like is not None
        total = sum((t.double() for t in terms), torch.zeros_like(like, dtype=torch.float64))
        magnitude = sum((t.double().abs() for t in terms), torch.zeros_like(like, dtype=torch.float64))
        p = mean_problem(f"inside no_sync after {micro} micro-batches: grad {name} (local sum)", grad, total,
                         rtol * (1 + micro) * magnitude + atol)
        if p is not None:
            problems.append(p)
    _loss(ddp, config, ctx.rank, micro, seed, dtype, ctx.device).backward()
    grads = _grads(model)
    for name, grad in grads.items():
        want = whole[name]
        if want is None and grad is None:
            continue
        want_d = _dense(want, grad if grad is not None else torch.zeros(()))
        magnitude = sum((_dense(g[r][name], want_d).abs() for g in every for r in range(config.world_size)),
                        torch.zeros_like(want_d)) / config.world_size
        p = mean_problem(f"after the synced backward: grad {name} (whole batch)", grad, want_d,
                         rtol * (config.steps * config.world_size + 1) * magnitude + atol)
        if p is not None:
            problems.append(p)
    return {"problems": capped(problems), "digests": [digest(grads)]}


def check_no_sync(pool: Pool, config: fst.DDPConfig, dtype: torch.dtype, seed: int, *,
                  no_sync: Callable[[DDP], Any] = _default_no_sync) -> None:
    """Accumulate ``config.steps - 1`` micro-batches under ``no_sync`` (a picklable
    ``(ddp) -> context manager``), then sync; raise :class:`PropertyFailure` if the gradients
    differ from the whole concatenated batch's or across ranks."""
    with known_failures("comm_hooks", config=config, dtype=dtype, seed=seed):
        results = pool.run(no_sync_training, config, dtype, seed, no_sync=no_sync)
        _check_agreement(results, "gradient accumulation with no_sync")
