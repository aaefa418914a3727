"""The allreduce and half-precision compression hooks (and their reordered variant): the same
result as DDP without a hook, or each element rounded as the docstrings say."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem
from fuzzdist.toolkit.checks import Digest, digest
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext
from fuzzdist.properties.comm_hooks.common import (
    _VANILLA_EQUALITY,
    _annotate,
    _check_agreement,
    _check_world,
    _close_bound,
    _ddp,
    _dense,
    _exact_scale,
    _grads,
    _loss,
    _same_as_vanilla,
    _sync_reference,
    _unscale,
    hook_configs,
    local_gradients,
    mean_problem,
)
from fuzzdist.properties.comm_hooks.reordered import _wrapped

# ---------------------------------------------------------------------------
# hooks by name (picklable: the ranks import them)


def fp16_wrapped_allreduce_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """``fp16_compress_wrapper(allreduce_hook)``, as a top-level (picklable) hook."""
    return default_hooks.fp16_compress_wrapper(default_hooks.allreduce_hook)(state, bucket)


def bf16_wrapped_allreduce_hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """``bf16_compress_wrapper(allreduce_hook)``, as a top-level (picklable) hook."""
    return default_hooks.bf16_compress_wrapper(default_hooks.allreduce_hook)(state, bucket)


# register_comm_hook checks the bucket's annotation is dist.GradBucket; this module's annotations are strings
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


@dataclass(frozen=True)
class CompressionCase:
    """A DDP config trained with the allreduce or a half-precision hook (``COMPRESSION_HOOKS``),
    its loss scaled by ``2 ** scale_exp``."""

    config: fst.DDPConfig
    hook: str = "allreduce"
    scale_exp: int = 0


def compression_cases(
    world_size: int, *, hooks: Iterable[str] | None = None, max_scale_exp: int = 24
) -> st.SearchStrategy[CompressionCase]:
    """Covers the hooks of ``CPU_HOOKS`` (or ``hooks``, any of ``COMPRESSION_HOOKS``) on ``hook_configs`` with the loss
    scaled by 2^0 .. 2^max_scale_exp: float16 overflows for the larger scales.  Shrinks to the
    first hook, scale 1 and ``hook_configs``' minimum."""
    names = CPU_HOOKS if hooks is None else tuple(hooks)
    if not names or any(n not in COMPRESSION_HOOKS for n in names):
        raise InvalidArgument(f"hooks must be a non-empty subset of {tuple(COMPRESSION_HOOKS)}, got {names!r}")
    return st.builds(
        CompressionCase,
        config=hook_configs(world_size),
        hook=st.sampled_from(names),
        scale_exp=st.integers(0, max_scale_exp),
    )


def half_expected(
    local: list[torch.Tensor | None],
    half: torch.dtype,
    like: torch.Tensor,
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


# ---------------------------------------------------------------------------
# allreduce and half-precision hooks (and their reordered variant)


def compressed_training(
    ctx: RankContext,
    case: CompressionCase,
    dtype: torch.dtype,
    seed: int,
    hook: Callable[..., Any] | None = None,
    pg_kind: str = "gloo",
    schedule: fst.CompletionOrder | None = None,
) -> dict[str, Any]:
    """On every rank: train ``case`` with ``hook`` (default: the case's named hook) registered with
    the process group (the pool's, or a ``ReorderingProcessGroup`` for ``pg_kind`` "reorder-*") as
    its state; check each step's gradients (module docstring); return problems and digests."""
    config = case.config
    _check_world(config, ctx)
    if case.hook not in COMPRESSION_HOOKS:
        raise InvalidArgument(f"unknown hook {case.hook!r}; choose from {tuple(COMPRESSION_HOOKS)}")
    named, half = COMPRESSION_HOOKS[case.hook]
    hook = named if hook is None else hook
    scale = float(2**case.scale_exp)
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
                        problems.append(
                            Problem(
                                Kind.MISMATCH,
                                f"step {step} grad {name}",
                                detail=(
                                    "not equal to DDP without a hook "
                                    f"({_VANILLA_EQUALITY[_exact_scale(ctx.world_size)]})"
                                ),
                            )
                        )
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


def check_compression(
    pool: Pool,
    case: CompressionCase,
    dtype: torch.dtype,
    seed: int,
    *,
    hook: Callable[..., Any] | None = None,
    pg_kind: str = "gloo",
    schedule: fst.CompletionOrder | None = None,
) -> None:
    """Train ``case`` on ``pool`` with ``hook`` (a picklable hook; default the case's named one)
    over the pool's group or, for ``pg_kind`` in ``REORDER_KINDS``, a ``ReorderingProcessGroup``
    releasing allreduces as ``schedule`` says; raise :class:`PropertyFailure` if the gradients break
    the named hook's contract or differ across ranks."""
    with known_failures("comm_hooks", case=case, dtype=dtype, seed=seed, pg_kind=pg_kind):
        results = pool.run(compressed_training, case, dtype, seed, hook=hook, pg_kind=pg_kind, schedule=schedule)
        _check_agreement(results, f"DDP with the {case.hook} hook")
