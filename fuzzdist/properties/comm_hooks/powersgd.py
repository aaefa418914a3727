"""PowerSGD: vanilla allreduce before ``start_powerSGD_iter``, the mean where nothing is approximated,
error feedback and warm start as the docstring and its paper say."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem, Symptom, listed
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties.ddp import TOLERANCES
from fuzzdist.toolkit.checks import digest
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext
from fuzzdist.properties.comm_hooks.common import (
    Tensors,
    _annotate,
    _check_world,
    _close_bound,
    _ddp,
    _dense,
    _grads,
    _loss,
    _same_as_vanilla,
    _sync_reference,
    hook_configs,
    local_gradients,
    mean_problem,
)

_KAPPA_LIMIT = 1e3  # summed PowerSGD matrices worse conditioned than this get no value check


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
        return {
            "matrix_approximation_rank": self.rank,
            "start_powerSGD_iter": self.start_iter,
            "min_compression_rate": self.min_compression_rate,
            "use_error_feedback": self.error_feedback,
            "warm_start": self.warm_start,
            "orthogonalization_epsilon": self.epsilon,
        }


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


# ---------------------------------------------------------------------------
# PowerSGD


def _observed(
    hook: Callable[..., Any],
    names: dict[int, str],
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


def powersgd_training(
    ctx: RankContext,
    case: PowerSGDCase,
    dtype: torch.dtype,
    seed: int,
    hook: Callable[..., Any] | None = None,
    state_factory: Callable[..., Any] = powerSGD_hook.PowerSGDState,
) -> dict[str, Any]:
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
            "grads": grads,
            "local": local,
            "error_before": error_before,
            "error_after": _tensors(getattr(state, "error_dict", {})),
            "layout": dict(layout),
            "low_rank": (
                digest({str(k): v for k, v in getattr(state, "p_memory_dict", {}).items()}),
                digest({str(k): v for k, v in getattr(state, "q_memory_dict", {}).items()}),
            ),
            "vanilla": None,
        }
        if step < case.start_iter:
            _loss(twin, config, ctx.rank, step, seed, dtype, ctx.device).backward()
            record["vanilla"] = [
                name
                for name, t in _grads(twin_model).items()
                if not _same_as_vanilla(grads[name], t, ctx.world_size, dtype, [g[name] for g in every_local])
            ]
            twin_opt.step()
            twin_opt.zero_grad(set_to_none=True)
        steps.append(record)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {
        "steps": steps,
        "params": digest(dict(model.named_parameters())),
        "shapes": {name: tuple(p.shape) for name, p in model.named_parameters()},
    }


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
    return torch.full_like(
        summed,
        10 * (n + m + world) * eps * (top / low) * scale + 4 * epsilon / low * scale + 10 * torch.finfo(dtype).tiny,
    )


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
                problems.append(
                    Problem(Kind.MISMATCH, f"step {step}: gradients", rank=rank, symptom=Symptom.RANKS_DIFFER)
                )
            if rec["low_rank"] != ref["low_rank"]:
                problems.append(
                    Problem(
                        Kind.MISMATCH,
                        f"step {step}: warm-start P/Q state",
                        rank=rank,
                        detail="differs from rank 0's bitwise",
                    )
                )
        if step < case.start_iter:
            for rank, rec in enumerate(recs):
                if rec["vanilla"]:
                    before = f"step {step} (before start_powerSGD_iter={case.start_iter})"
                    problems.append(
                        Problem(
                            Kind.MISMATCH,
                            before,
                            rank=rank,
                            detail=f"{rec['vanilla']} not bitwise equal to DDP without a hook",
                        )
                    )
            continue
        layout: dict[int, list[str]] = ref["layout"]
        grads: Tensors = ref["grads"]
        shapes: dict[str, tuple[int, ...]] = results[0]["shapes"]
        for index, names in layout.items():
            # each rank's input to the hook: local gradient plus the carried error, flat in bucket order
            flat_local = [
                torch.cat([_dense(rec["local"][n], torch.empty(shapes[n])).reshape(-1) for n in names]) for rec in recs
            ]
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
                        problems.append(
                            Problem(Kind.MISSING, f"step {step} bucket {index}: error-feedback state", rank=rank)
                        )
                        continue
                    mean, bound = _close_bound([inp - flat_grad], dtype)
                    bound = bound * 4 + TOLERANCES[dtype][0] * world * (inp.abs() + flat_grad.abs())
                    p = mean_problem(
                        f"step {step} bucket {index} rank {rank} error feedback (input minus returned gradient)",
                        after.double()[:length],
                        mean,
                        bound,
                    )
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
                        p = mean_problem(
                            f"step {step} bucket {index} (batched, rank {case.rank} >= side {side})",
                            flat_grad,
                            summed / world,
                            square.reshape(-1)[:length],
                        )
                        if p is not None:
                            problems.append(p)
                continue
            offset = 0
            for name in names:
                shape = shapes[name]
                size = math.prod(shape)
                part, mag = summed[offset : offset + size], magnitude[offset : offset + size]
                got = flat_grad[offset : offset + size]
                offset += size
                compressed, n, m = compressed_by_powersgd(shape, case.rank, case.min_compression_rate)
                if not compressed:
                    p = mean_problem(
                        f"step {step} grad {name} (not compressed)",
                        got,
                        part / world,
                        rtol * world * mag / world + atol,
                    )
                elif case.rank >= min(n, m):
                    bound_or_none = _lossless_bound(part.view(n, m), world, dtype, case.epsilon)
                    if case.warm_start and bound_or_none is None:
                        q_singular.add((index, name))
                    if bound_or_none is None or (index, name) in q_singular:
                        continue
                    p = mean_problem(
                        f"step {step} grad {name} (compressed at full rank {min(n, m)})",
                        got,
                        part / world,
                        bound_or_none.reshape(-1),
                    )
                else:
                    continue  # a lossy approximation: only the state and error-feedback checks
                if p is not None:
                    problems.append(p)
    if any(r["params"] != results[0]["params"] for r in results):
        problems.append(Problem(Kind.MISMATCH, "parameters", detail="not bitwise equal on every rank"))
    return problems


def check_powersgd(
    pool: Pool,
    case: PowerSGDCase,
    dtype: torch.dtype,
    seed: int,
    *,
    hook: Callable[..., Any] | None = None,
    state_factory: Callable[..., Any] = powerSGD_hook.PowerSGDState,
) -> None:
    """Train ``case`` on ``pool`` with ``hook`` and ``state_factory`` (picklable); raise
    :class:`PropertyFailure` if PowerSGD breaks its documented contract (module docstring)."""
    with known_failures("comm_hooks", case=case, dtype=dtype, seed=seed):
        results = pool.run(powersgd_training, case, dtype, seed, hook=hook, state_factory=state_factory)
        problems = powersgd_problems(results, case, dtype)
        if problems:
            raise PropertyFailure(
                f"PowerSGD breaks its contract:{listed(capped(problems))}", results, problems=problems
            )
