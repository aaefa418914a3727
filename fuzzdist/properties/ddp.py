"""DDP parity: DistributedDataParallel's gradients and parameters match a local model's.

For any DDP setup ``fst.ddp_configs`` draws, with even or uneven per-rank
batches, run over the pool's gloo group directly or through a
``ReorderingProcessGroup`` that releases the allreduces in a drawn order
(both Work forms):

* after every backward, each rank's gradients equal the reference
  gradients (see ``reference_gradients``) within the dtype's tolerance, and
  are bitwise equal on every rank;
* after ``config.steps`` optimizer steps, the parameters equal the
  reference model's, also trained locally, within tolerance, and are
  bitwise equal on every rank.

On CUDA (``device="cuda"``) the model, the reference and the batches live on the rank's GPU:
several ranks share one GPU over gloo, the ``ReorderingProcessGroup`` kinds hand DDP
device-aware futures, and with one GPU per rank the group can be nccl.

Generalises torch's DDP-versus-local-model tests (seed 003, ``test_c10d_spawn_gloo.py``'s
``DistributedDataParallelSingleProcessTest``: one fixed model and batch) and DDP over a Python
ProcessGroup (seed 002, ``test_c10d_pypg.py``'s ``test_ddp_with_pypg``) to drawn models, batches,
optimizers, DDP options and allreduce completion orders.  ``wrap`` puts any process group under
DDP: ``check(pool, config, dtype, seed, wrap=MyGroup)`` runs the property over ``MyGroup(group)``.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Problem, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import Digest, digest, tolerance_problem
from fuzzdist.toolkit.models import step_together
from fuzzdist.toolkit.reorder import ReorderingProcessGroup
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

SEEDS = seeds()
DTYPES = st.sampled_from([torch.float32, torch.float64])
# (rtol, atol): torch.testing.assert_close's defaults for the dtype.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}
MAX_WINDOW = 4  # the reordering schedule covers windows of 1..MAX_WINDOW allreduces
PG_KINDS = ("gloo", "reorder-subclass", "reorder-future")
NCCL_PG_KINDS = ("nccl", "reorder-subclass", "reorder-future")  # one GPU per rank: the pool's group is nccl


def completion_schedules(max_window: int = MAX_WINDOW) -> st.SearchStrategy[fst.CompletionOrder]:
    """Orders for DDP's allreduces: every work completes (no errors, drops or waits:
    DDP is not expected to survive a failed allreduce).  Shrinks to one work, in order."""
    by_n = {
        n: fst.completion_orders(n, allow_errors=False, allow_drops=False, allow_waits=False)
        for n in range(1, max_window + 1)
    }
    return st.integers(1, max_window).flatmap(by_n.__getitem__)


def _buffers(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: b.detach().clone() for name, b in module.named_buffers()}


def _load_buffers(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, b in module.named_buffers():
            b.copy_(state[name])


def _device_of(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


def ddp_device_kwargs(device: torch.device) -> dict[str, Any]:
    """DDP's device arguments for a model on ``device``: ``device_ids=[index]`` on a CUDA device
    (the rank's own GPU, ``r % device_count``), none on CPU (DDP refuses device_ids there)."""
    device = torch.device(device)
    if device.type == "cpu":
        return {}
    if device.index is None:
        raise InvalidArgument(f"DDP needs the rank's device with its index, e.g. cuda:0, got {device}")
    return {"device_ids": [device.index]}


def reference_gradients(
    reference: nn.Module,
    config: fst.DDPConfig,
    step: int,
    seed: int,
    dtype: torch.dtype,
    rank_buffers: list[dict[str, torch.Tensor]],
) -> tuple[dict[str, torch.Tensor | None], list[dict[str, torch.Tensor]]]:
    """The gradients DDP promises, computed on one local model with no communication.

    DDP's contract: rank r's loss is the mean over its own ``b_r`` samples;
    DDP averages gradients over *ranks* (divides by the world size W), not
    over samples. So every rank ends up with

        g = (1/W) * sum_r grad(mean_loss_r)
          = grad( sum_r sum_{i in batch_r} l_i / (W * b_r) )

    This is the gradient of the whole batch (all ranks' inputs
    concatenated) with per-sample weight 1/(W * b_r). With uneven batches
    that differs from the plain mean over all samples. The global batch is
    run chunk by chunk, in rank order. Each chunk's gradient is scaled by
    1/W and the chunks are summed in rank order, so the arithmetic stays
    close to DDP's (scale each rank's gradient, then sum): Adam's
    normalisation then does not amplify rounding differences in
    near-zero gradients into failures.

    Buffers: each chunk runs with the buffers its rank would hold. With
    buffer sync on, DDP broadcasts rank 0's buffers before every forward,
    so every chunk starts from rank 0's buffers after the previous step.
    Without sync, each rank keeps its own. ``rank_buffers[r]`` holds rank
    r's buffers after the previous step; the updated list is returned.

    A parameter no chunk uses gets None. The caller treats None and zeros
    alike.  ``whole_batch_gradients`` states the same contract on the
    concatenated batch in one pass, as a cross-check.
    """
    world = config.world_size
    total: dict[str, torch.Tensor | None] = {name: None for name, _ in reference.named_parameters()}
    updated: list[dict[str, torch.Tensor]] = []
    for r in range(world):
        if rank_buffers:
            _load_buffers(reference, rank_buffers[0] if config.broadcast_buffers else rank_buffers[r])
        reference.zero_grad(set_to_none=True)
        inputs, targets = config.make_batch(r, step, seed)
        device = _device_of(reference)
        loss = nn.functional.mse_loss(reference(inputs.to(device, dtype)), targets.to(device, dtype))
        loss.backward()
        for name, p in reference.named_parameters():
            if p.grad is None:
                continue
            contribution = p.grad * (1.0 / world)
            so_far = total[name]
            total[name] = contribution if so_far is None else so_far + contribution
        updated.append(_buffers(reference))
    reference.zero_grad(set_to_none=True)
    return total, updated


def whole_batch_gradients(
    reference: nn.Module, config: fst.DDPConfig, step: int, seed: int, dtype: torch.dtype
) -> dict[str, torch.Tensor | None]:
    """DDP's contract on the whole batch, literally: every rank's inputs concatenated, one
    forward and backward of sum_i w_i * (squared error of element i), where an element of
    rank r's batch weighs w_i = 1 / (W * b_r * out_features): rank r's mean loss, divided
    by W.  Only for models without buffers: with buffers, each rank's samples see that
    rank's own buffers, which one forward over the concatenation can't reproduce."""
    world, out_features = config.world_size, config.widths[-1]
    device = _device_of(reference)
    batches = [config.make_batch(r, step, seed) for r in range(world)]
    inputs = torch.cat([x for x, _ in batches]).to(device, dtype)
    targets = torch.cat([y for _, y in batches]).to(device, dtype)
    weights = torch.cat(
        [torch.full((b, 1), 1.0 / (world * b * out_features), dtype=dtype, device=device) for b in config.batch_sizes]
    )
    reference.zero_grad(set_to_none=True)
    (((reference(inputs) - targets) ** 2) * weights).sum().backward()
    grads = {name: None if p.grad is None else p.grad.detach().clone() for name, p in reference.named_parameters()}
    reference.zero_grad(set_to_none=True)
    return grads


def _mismatch(
    what: str, actual: torch.Tensor | None, expected: torch.Tensor | None, rtol: float, atol: float
) -> Problem | None:
    """None if close (None counts as zeros), else the worst difference."""
    if actual is None and expected is None:
        return None
    if actual is None:
        assert expected is not None
        actual = torch.zeros_like(expected)
    if expected is None:
        expected = torch.zeros_like(actual)
    return tolerance_problem(what, actual.detach(), expected.detach(), rtol, atol, worst=True)


def ddp_parity(
    ctx: RankContext,
    config: fst.DDPConfig,
    dtype: torch.dtype,
    seed: int,
    wrap: Callable[..., dist.ProcessGroup] | None = None,
    wrap_args: tuple[Any, ...] = (),
    wrap_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """On every rank: train DDP over ``wrap(ctx.group, *wrap_args, **wrap_kwargs)`` (or
    ctx.group itself) next to a local reference model, both on ``ctx.device`` (a CUDA rank's
    model is on its own GPU and DDP gets ``device_ids``); return the mismatches and digests.

    ``wrap`` is swappable so that tests can plant faulty process groups.
    """
    rtol, atol = TOLERANCES[dtype]
    pg = ctx.group if wrap is None else wrap(ctx.group, *wrap_args, **(wrap_kwargs or {}))
    mismatches: list[Problem] = []
    grad_digests: list[Digest] = []
    try:
        model = config.build_model(seed).to(ctx.device, dtype)
        reference = copy.deepcopy(model)  # same seed, same values: built before DDP touches them
        with warnings.catch_warnings():
            # Expected: the drawn pairing static_graph + find_unused_parameters is valid and kept
            # (both code paths run), and torch says the flag is redundant with static_graph.
            warnings.filterwarnings("ignore", message="You passed find_unused_parameters=true", category=UserWarning)
            ddp = DDP(model, process_group=pg, **ddp_device_kwargs(ctx.device), **config.ddp_kwargs())
        optimizer = config.build_optimizer(ddp.parameters())
        ref_optimizer = config.build_optimizer(reference.parameters())
        rank_buffers = [_buffers(reference)] * config.world_size if config.buffers else []
        for step in range(config.steps):
            expected, rank_buffers = reference_gradients(reference, config, step, seed, dtype, rank_buffers)
            whole = {} if config.buffers else whole_batch_gradients(reference, config, step, seed, dtype)
            inputs, targets = config.make_batch(ctx.rank, step, seed)
            loss = nn.functional.mse_loss(ddp(inputs.to(ctx.device, dtype)), targets.to(ctx.device, dtype))
            loss.backward()
            grads = {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}
            grad_digests.append(digest(grads))
            for name, grad in grads.items():
                diff = _mismatch(f"step {step} grad {name}", grad, expected[name], rtol, atol)
                if diff is None and name in whole:
                    diff = _mismatch(f"step {step} grad {name} (whole batch)", grad, whole[name], rtol, atol)
                if diff is not None:
                    mismatches.append(diff)
            with torch.no_grad():
                for name, p in reference.named_parameters():
                    p.grad = expected[name]
            step_together(optimizer, ref_optimizer)
        params = {name: p.detach().clone() for name, p in model.named_parameters()}
        ref_params = dict(reference.named_parameters())
        for name, param in params.items():
            diff = _mismatch(f"after {config.steps} steps param {name}", param, ref_params[name], rtol, atol)
            if diff is not None:
                mismatches.append(diff)
    finally:
        if pg is not ctx.group and hasattr(pg, "close"):
            pg.close()
    return {
        "mismatches": capped(mismatches),
        "grad_digests": grad_digests,
        "param_digest": digest(params),
    }


def check_parity(results: list[dict[str, Any]]) -> None:
    """Check in the driver what the ranks' ``ddp_parity`` returned: raise
    :class:`PropertyFailure` if any rank differs from the reference, or the ranks' gradients or
    parameters are not bitwise equal."""
    wrong = {rank: obs["mismatches"] for rank, obs in enumerate(results) if obs["mismatches"]}
    if wrong:
        raise PropertyFailure(
            f"DDP differs from the local reference on ranks {sorted(wrong)}:{by_rank(wrong)}", results
        )
    for step in range(len(results[0]["grad_digests"])):
        digests = [obs["grad_digests"][step] for obs in results]
        if not all(d == digests[0] for d in digests):
            raise PropertyFailure(f"step {step}: gradients differ across ranks", results)
    digests = [obs["param_digest"] for obs in results]
    if not all(d == digests[0] for d in digests):
        raise PropertyFailure("parameters are not bitwise equal on every rank", results)


def check(
    pool: Pool,
    config: fst.DDPConfig,
    dtype: torch.dtype,
    seed: int,
    *,
    wrap: Callable[..., dist.ProcessGroup] | None = None,
    wrap_args: tuple[Any, ...] = (),
    wrap_kwargs: dict[str, Any] | None = None,
) -> None:
    """Train DDP on every rank of ``pool`` as ``config`` says, over the pool's group or over
    ``wrap(group, *wrap_args, **wrap_kwargs)``, next to a local reference model; raise
    :class:`PropertyFailure` if the gradients or parameters differ from the reference's or across
    ranks.  ``wrap`` must be importable on the ranks (a top-level class or function)."""
    results = pool.run(ddp_parity, config, dtype, seed, wrap=wrap, wrap_args=wrap_args, wrap_kwargs=wrap_kwargs)
    check_parity(results)


def pg_wrapper(pg_kind: str, schedule: fst.CompletionOrder | None) -> dict[str, Any]:
    """The keyword arguments of ``check`` (and ``ddp_parity``) that select the process group: none
    for the pool's own group (``"gloo"``, ``"nccl"``), else a ``ReorderingProcessGroup`` over it
    releasing allreduces as ``schedule`` says."""
    if pg_kind in ("gloo", "nccl"):
        return {}
    form = pg_kind.split("-", 1)[1]
    # Only allreduces go through the schedule: DDP has several in flight (its buckets,
    # and the unused-parameter map); its broadcasts and allgathers are waited on at once.
    return {
        "wrap": ReorderingProcessGroup,
        "wrap_args": (schedule,),
        "wrap_kwargs": {"work_form": form, "ops": ("allreduce",)},
    }
