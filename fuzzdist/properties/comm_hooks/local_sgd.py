"""Post-local SGD: each rank follows its replica of a local simulation, and ranks agree where the
replicas do."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook
from torch.distributed.algorithms.model_averaging import averagers
from torch.distributed.optim import PostLocalSGDOptimizer

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Problem
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties._results import fail_on_reported_problems
from fuzzdist.properties.ddp import TOLERANCES
from fuzzdist.toolkit.checks import Digest, digest
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext
from fuzzdist.properties.comm_hooks.common import _check_world, _ddp, _loss, hook_configs, local_gradients, mean_problem


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
    return st.builds(
        LocalSGDCase,
        config=hook_configs(world_size, max_steps=max_steps, optimizers="sgd"),
        start_iter=st.integers(0, 3),
        period=st.integers(1, max_period),
        post_local_allreduce=st.booleans(),
        optimizer_wrapper=st.booleans(),
    )


# ---------------------------------------------------------------------------
# post-local SGD


def local_sgd_reference(
    case: LocalSGDCase,
    model: nn.Module,
    seed: int,
    dtype: torch.dtype,
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


def local_sgd_training(
    ctx: RankContext,
    case: LocalSGDCase,
    dtype: torch.dtype,
    seed: int,
    hook: Callable[..., Any] = post_localSGD_hook.post_localSGD_hook,
    state_factory: Callable[..., Any] = post_localSGD_hook.PostLocalSGDState,
    averager_factory: Callable[..., Any] = averagers.PeriodicModelAverager,
    optimizer_factory: Callable[..., Any] = PostLocalSGDOptimizer,
) -> dict[str, Any]:
    """On every rank: post-local SGD as the docs' example runs it, next to the local simulation of
    the replicas; return problems and, per step, the parameters' digest."""
    config = case.config
    _check_world(config, ctx)
    model = config.build_model(seed).to(ctx.device, dtype)
    expected = local_sgd_reference(case, copy.deepcopy(model), seed, dtype)
    ddp = _ddp(model, ctx.group, ctx, config)
    state = state_factory(
        process_group=ctx.group,
        subgroup=ctx.group if case.post_local_allreduce else None,
        start_localSGD_iter=case.start_iter,
        post_local_gradient_allreduce=case.post_local_allreduce,
    )
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


def check_local_sgd(
    pool: Pool,
    case: LocalSGDCase,
    dtype: torch.dtype,
    seed: int,
    *,
    hook: Callable[..., Any] = post_localSGD_hook.post_localSGD_hook,
    state_factory: Callable[..., Any] = post_localSGD_hook.PostLocalSGDState,
    averager_factory: Callable[..., Any] = averagers.PeriodicModelAverager,
    optimizer_factory: Callable[..., Any] = PostLocalSGDOptimizer,
) -> None:
    """Run post-local SGD as ``case`` says on ``pool``; raise :class:`PropertyFailure` if a rank's
    parameters leave its replica's in the local simulation, or ranks differ after a step where the
    replicas are equal."""
    with known_failures("comm_hooks", case=case, dtype=dtype, seed=seed):
        results = pool.run(
            local_sgd_training,
            case,
            dtype,
            seed,
            hook=hook,
            state_factory=state_factory,
            averager_factory=averager_factory,
            optimizer_factory=optimizer_factory,
        )
        fail_on_reported_problems(results, "post-local SGD differs from the local simulation")
        for step in range(case.config.steps):
            if synced_after(case, step) and any(r["digests"][step] != results[0]["digests"][step] for r in results):
                raise PropertyFailure(
                    f"after step {step} the parameters should be equal on every rank "
                    "(averaged or globally synced) but are not bitwise equal",
                    results,
                )
