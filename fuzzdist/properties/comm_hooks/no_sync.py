"""``DistributedDataParallel.no_sync``: local sums inside, the whole concatenated batch after."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Problem
from fuzzdist.properties.ddp import TOLERANCES
from fuzzdist.toolkit.checks import digest
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext
from fuzzdist.properties.comm_hooks.common import (
    Tensors,
    _check_agreement,
    _check_world,
    _ddp,
    _dense,
    _grads,
    _loss,
    hook_configs,
    local_gradients,
    mean_problem,
)


def no_sync_configs(world_size: int, *, max_micro_batches: int = 3) -> st.SearchStrategy[fst.DDPConfig]:
    """``hook_configs`` whose ``steps`` is the number of micro-batches plus the synced one: 1 to
    ``max_micro_batches + 1``.  Shrinks to no micro-batch (one plain synced backward)."""
    return hook_configs(world_size, max_steps=max_micro_batches + 1)


# ---------------------------------------------------------------------------
# no_sync


def concatenated_gradients(
    reference: nn.Module,
    config: fst.DDPConfig,
    seed: int,
    dtype: torch.dtype,
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


def no_sync_training(
    ctx: RankContext,
    config: fst.DDPConfig,
    dtype: torch.dtype,
    seed: int,
    no_sync: Callable[[DDP], Any] = _default_no_sync,
) -> dict[str, Any]:
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
        p = mean_problem(
            f"inside no_sync after {micro} micro-batches: grad {name} (local sum)",
            grad,
            total,
            rtol * (1 + micro) * magnitude + atol,
        )
        if p is not None:
            problems.append(p)
    _loss(ddp, config, ctx.rank, micro, seed, dtype, ctx.device).backward()
    grads = _grads(model)
    for name, grad in grads.items():
        want = whole[name]
        if want is None and grad is None:
            continue
        want_d = _dense(want, grad if grad is not None else torch.zeros(()))
        magnitude = (
            sum(
                (_dense(g[r][name], want_d).abs() for g in every for r in range(config.world_size)),
                torch.zeros_like(want_d),
            )
            / config.world_size
        )
        p = mean_problem(
            f"after the synced backward: grad {name} (whole batch)",
            grad,
            want_d,
            rtol * (config.steps * config.world_size + 1) * magnitude + atol,
        )
        if p is not None:
            problems.append(p)
    return {"problems": capped(problems), "digests": [digest(grads)]}


def check_no_sync(
    pool: Pool,
    config: fst.DDPConfig,
    dtype: torch.dtype,
    seed: int,
    *,
    no_sync: Callable[[DDP], Any] = _default_no_sync,
) -> None:
    """Accumulate ``config.steps - 1`` micro-batches under ``no_sync`` (a picklable
    ``(ddp) -> context manager``), then sync; raise :class:`PropertyFailure` if the gradients
    differ from the whole concatenated batch's or across ranks."""
    with known_failures("comm_hooks", config=config, dtype=dtype, seed=seed):
        results = pool.run(no_sync_training, config, dtype, seed, no_sync=no_sync)
        _check_agreement(results, "gradient accumulation with no_sync")
