"""What the communication-hook checks share: the configs, the local reference, the comparisons, the
training steps around a hook."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties._results import fail_on_reported_problems
from fuzzdist.properties.ddp import TOLERANCES, ddp_device_kwargs
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import fingerprint, first_disagreement, mismatch

if TYPE_CHECKING:
    from fuzzdist.pool.rank.context import RankContext


SEEDS = seeds()
DTYPES = st.sampled_from([torch.float32, torch.float64])
Tensors = dict[str, torch.Tensor | None]


def _annotate(hook: Callable[..., Any]) -> None:
    """Give ``hook`` the evaluated annotations ``register_comm_hook`` checks (this module's are strings)."""
    hook.__annotations__ = {"state": Any, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


# ---------------------------------------------------------------------------
# strategies


def hook_configs(
    world_size: int,
    *,
    max_depth: int = 2,
    max_width: int = 6,
    max_batch: int = 4,
    max_steps: int = 3,
    optimizers: None | str | Iterable[str] = None,
) -> st.SearchStrategy[fst.DDPConfig]:
    """``fst.ddp_configs`` (every DDP option it draws) without buffers, small: the hooks' subject is
    gradients, and buffers are DDP parity's.  Shrinks like ``ddp_configs``: a 1->1 model, batch 1,
    DDP defaults, one SGD step."""
    return fst.ddp_configs(
        world_size,
        max_depth=max_depth,
        max_width=max_width,
        max_batch=max_batch,
        max_steps=max_steps,
        optimizers=optimizers,
    ).map(lambda c: dataclasses.replace(c, buffers=False, broadcast_buffers=True))


# ---------------------------------------------------------------------------
# the reference (no communication)


def local_gradients(
    reference: nn.Module, config: fst.DDPConfig, step: int, seed: int, dtype: torch.dtype, scale: float = 1.0
) -> list[Tensors]:
    """Each rank's local gradient at ``step``: of ``scale`` times its mean squared error on its own
    batch, from ``reference`` (left with no gradients).  A parameter a rank doesn't use gets None."""
    out = []
    for r in range(config.world_size):
        reference.zero_grad(set_to_none=True)
        inputs, targets = config.make_batch(r, step, seed)
        (nn.functional.mse_loss(reference(inputs.to(dtype)), targets.to(dtype)) * scale).backward()
        out.append(
            {name: None if p.grad is None else p.grad.detach().clone() for name, p in reference.named_parameters()}
        )
    reference.zero_grad(set_to_none=True)
    return out


def _dense(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like, dtype=torch.float64) if t is None else t.double()


def mean_problem(
    what: str,
    actual: torch.Tensor | None,
    mean: torch.Tensor,
    bound: torch.Tensor | float,
) -> Problem | None:
    """None if every element of ``actual`` (None = zeros) is within ``bound`` of ``mean`` (infinities
    and NaNs must match exactly), else the first difference."""
    a = torch.zeros_like(mean) if actual is None else actual.detach().double()
    if a.shape != mean.shape:
        return Problem(Kind.SHAPE, what, got=tuple(a.shape), expected=tuple(mean.shape))
    bound_t = torch.as_tensor(bound, dtype=torch.float64).expand_as(mean)
    finite = torch.isfinite(mean)
    ok = torch.where(finite, (a - mean).abs() <= bound_t, (a == mean) | (torch.isnan(a) & torch.isnan(mean)))
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


def _loss(
    ddp: nn.Module,
    config: fst.DDPConfig,
    rank: int,
    step: int,
    seed: int,
    dtype: torch.dtype,
    device: torch.device,
    scale: float = 1.0,
) -> torch.Tensor:
    inputs, targets = config.make_batch(rank, step, seed)
    return nn.functional.mse_loss(ddp(inputs.to(device, dtype)), targets.to(device, dtype)) * scale


def _ddp(model: nn.Module, pg: Any, ctx: RankContext, config: fst.DDPConfig) -> DDP:
    with warnings.catch_warnings():
        # Expected: static_graph with find_unused_parameters is a valid drawn pairing (see ddp.py).
        warnings.filterwarnings("ignore", message="You passed find_unused_parameters=true", category=UserWarning)
        return DDP(model, process_group=pg, **ddp_device_kwargs(ctx.device), **config.ddp_kwargs())


def _check_world(config: fst.DDPConfig, ctx: RankContext) -> None:
    if config.world_size != ctx.world_size:
        raise InvalidArgument(
            f"the config is for {config.world_size} ranks; this pool has {ctx.world_size}: "
            f"draw it with the strategy's world_size={ctx.world_size}"
        )


def _check_agreement(results: list[dict[str, Any]], what: str) -> None:
    fail_on_reported_problems(results, f"{what} breaks its contract")
    disagreement = first_disagreement(results)
    if disagreement is not None:
        rank, at = disagreement
        raise PropertyFailure(
            f"{what}: rank {rank} differs from rank 0 bitwise at check #{at} "
            "(each step's gradients, then the final parameters)",
            results,
        )


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Bitwise equality (NaNs included); None only equals None."""
    if a is None or b is None:
        return a is None and b is None
    return fingerprint(a) == fingerprint(b)


_VANILLA_EQUALITY = {True: "bitwise", False: "within tolerance"}


def _exact_scale(world: int) -> bool:
    """Whether 1/W is exact in binary (W a power of two)."""
    return world & (world - 1) == 0


def _same_as_vanilla(
    a: torch.Tensor | None, b: torch.Tensor | None, world: int, dtype: torch.dtype, terms: Sequence[torch.Tensor | None]
) -> bool:
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
