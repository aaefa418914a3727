"""FSDP2 parity: ``fully_shard``'s gradients and parameters match a local model's, step by step.

For any FSDP2 setup ``fst.fsdp_configs`` draws (model, even or uneven per-rank batches, 1-D or
HSDP mesh, root-only or per-layer sharding, ``reshard_after_forward``, mixed precision), on CPU
ranks over gloo, at every one of ``config.steps`` optimizer steps:

* before the step, every rank's gathered parameters (its shard-group's pieces put together)
  equal the local reference model's: at step 0 the model as built (``fully_shard`` must not
  change a value), later the reference after the same optimizer step;
* after backward, every rank's gathered gradients equal the mean over ranks of each rank's
  local gradient, computed on the reference with no communication (see ``rank_gradients``);
* gathered gradients and parameters are bitwise equal on every rank.

Tolerances, justified per dtype.  Each rank's local gradient ``g_r`` is computed by the
reference exactly as FSDP's unsharded module computes it: parameters and inputs cast to
``param_dtype`` at the same module boundaries, outputs to ``output_dtype``, so ``g_r`` is the
same computation in the same dtype.  What is left is the reduction: FSDP casts ``g_r`` to the
reduce dtype R (``reduce_dtype``, else ``param_dtype``, else the model's dtype), may divide before
and after (float16 and float64) or reduce with AVG (float32, bfloat16), reduce-scatters over the
shard ranks and, for HSDP, all-reduces over the replicas: at most W + 3 roundings in R, each
within R's eps relative to the terms.  So each element must be within
``(W + 3) * eps(R) * mean_r |g_r| + (W + 3) * (R's subnormal spacing)`` of the exact float64
mean: a bound on rounding alone, which no lost or doubled contribution fits into.

Parameters.  The optimizer updates the sharded parameters elementwise, the reference the whole
ones, from the same values and gradients: after each step's checks the reference takes the
gathered gradients and, before the next, the gathered parameters (once checked), so every step
is checked from the same start.  Without that, a last-bit difference in one step (from a
differently fused kernel, say) would be amplified by a bfloat16 forward or Adam's normalisation
of near-zero gradients into a false failure several steps on.  Parameters compare within
``torch.testing.assert_close``'s default tolerance of the dtype.

Found by experiment on torch 2.13 (CPU, gloo): everything ``fsdp_configs`` draws runs, HSDP and
bfloat16/float16 reductions included.  ``torch`` requires a weight shared by two modules to be in
one group (``fully_shard([a, b])``; sharding them apart raises), so the config does that.

Generalises torch's FSDP2-versus-local-model tests (``test_fully_shard_training.py``: fixed
models and meshes on GPU ranks) to drawn models, meshes, options and precisions on CPU.  The
communication is swappable through FSDP's own hooks: ``check(..., reduce_scatter=MyComm)`` puts
``MyComm()`` on every FSDP module with ``set_custom_reduce_scatter`` (``all_gather`` likewise).
Importing this module raises ImportError where torch has no ``fully_shard``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st
from torch import nn

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.pool.rank.isolation import keep_process_groups
from fuzzdist.problems import Problem
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties._results import fail_on_reported_problems
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import Digest, digest, first_disagreement, gradient_problem, tolerance_problem
from fuzzdist.toolkit.models import step_together
from fuzzdist.toolkit.reporting import capped

try:
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor
except ImportError as exc:  # pragma: no cover - torch < 2.6
    raise ImportError(f"torch {torch.__version__} has no torch.distributed.fsdp.fully_shard") from exc

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

SEEDS = seeds()
DTYPES = st.sampled_from([torch.float32, torch.float64])  # the model's (master parameters') dtype
# (rtol, atol) for parameters: torch.testing.assert_close's defaults for the dtype.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}
# all_gather_into_tensor is deprecated (a FutureWarning) where all_gather_single exists
_ALL_GATHER = getattr(torch.distributed, "all_gather_single", None) or torch.distributed.all_gather_into_tensor


# ---------------------------------------------------------------------------
# the reference


def _cast_inputs(dtype: torch.dtype) -> Callable[..., Any]:
    def hook(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)

    return hook


def _cast_output(dtype: torch.dtype) -> Callable[..., Any]:
    def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
        return output.to(dtype) if output.is_floating_point() else output

    return hook


def _fsdp_modules(config: fst.FSDPConfig, model: nn.Module) -> list[nn.Module]:
    """The modules ``fully_shard`` is applied to (each module of a group), the root last."""
    modules: list[nn.Module] = []
    for group in config.shard_groups(model):
        modules.extend(group if isinstance(group, list) else [group])
    return modules + [model]


def compute_model(reference: nn.Module, config: fst.FSDPConfig) -> nn.Module:
    """A copy of ``reference`` that computes the way FSDP's unsharded modules do under
    ``config``'s ``MixedPrecisionPolicy``, by its documented contract: parameters in
    ``param_dtype``; at every module ``fully_shard`` is applied to, floating inputs cast to
    ``param_dtype`` before its forward and floating outputs to ``output_dtype`` after it."""
    model = copy.deepcopy(reference)  # deepcopy keeps the tied weight tied
    if config.param_dtype is not None:
        model.to(config.param_dtype)
    for module in _fsdp_modules(config, model):
        if config.param_dtype is not None:
            module.register_forward_pre_hook(_cast_inputs(config.param_dtype))
        if config.output_dtype is not None:
            module.register_forward_hook(_cast_output(config.output_dtype))
    return model


def loss_of(
    model: nn.Module, config: fst.FSDPConfig, rank: int, step: int, seed: int, dtype: torch.dtype
) -> torch.Tensor:
    """Rank ``rank``'s loss at ``step``: the mean squared error over its own batch."""
    inputs, targets = config.make_batch(rank, step, seed)
    return nn.functional.mse_loss(model(inputs.to(dtype)), targets.to(dtype))


def rank_gradients(
    reference: nn.Module, config: fst.FSDPConfig, step: int, seed: int, dtype: torch.dtype
) -> list[dict[str, torch.Tensor | None]]:
    """Each rank's local gradient at ``step`` (the gradient of its mean loss, in the compute dtype),
    from one local model with no communication.  FSDP2's contract: every rank ends with the mean
    of these over the W ranks of the mesh (replicas included), sharded."""
    model = compute_model(reference, config)
    grads = []
    for r in range(config.world_size):
        model.zero_grad(set_to_none=True)
        loss_of(model, config, r, step, seed, dtype).backward()
        grads.append(
            {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}
        )
    return grads


def reduce_dtype(config: fst.FSDPConfig, dtype: torch.dtype) -> torch.dtype:
    """The dtype FSDP reduces gradients in: ``reduce_dtype``, else ``param_dtype``, else the model's."""
    return config.reduce_dtype or config.param_dtype or dtype


def expected_gradient(
    local: list[torch.Tensor | None], world: int, reduce_in: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(the exact float64 mean of the ranks' gradients, the per-element rounding bound of reducing
    them in ``reduce_in``: see the module docstring); None if no rank has a gradient."""
    present = [g.double() for g in local if g is not None]
    if not present:
        return None
    mean = torch.stack(present).sum(0) / world
    magnitude = torch.stack([g.abs() for g in present]).sum(0) / world
    info = torch.finfo(reduce_in)
    roundings = world + 3
    return mean, roundings * info.eps * magnitude + roundings * info.smallest_normal * info.eps


# ---------------------------------------------------------------------------
# on the ranks

# (device type, mesh shape) -> DeviceMesh, one per shape for the process's life
_MESHES: dict[tuple[str, tuple[int, ...]], DeviceMesh] = {}


def device_mesh(device_type: str, shape: tuple[int, ...]) -> DeviceMesh:
    """The DeviceMesh of ``shape`` over the pool's default group, with the dim names HSDP requires
    (``("replicate", "shard")``); built once per rank process (a 2-D mesh creates sub-groups, a
    collective: every rank gets here in the same example)."""
    key = (device_type, tuple(shape))
    if key not in _MESHES:
        names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
        with keep_process_groups():  # cached for the process's life: not destroyed after the example
            _MESHES[key] = init_device_mesh(device_type, tuple(shape), mesh_dim_names=names)
    return _MESHES[key]


def gather(
    tensors: dict[str, torch.Tensor | None], shapes: dict[str, torch.Size], mesh: DeviceMesh, dtype: torch.dtype
) -> dict[str, torch.Tensor | None]:
    """The whole tensors of FSDP's sharded ones (DTensors sharded on dim 0 over the mesh's shard dim
    with ``torch.chunk`` pieces, replicated over its replicate dim), in one all-gather over the shard
    ranks: each rank's pieces, zero-padded to the chunk size, in one buffer.  (``full_tensor()``
    would cost a collective per tensor, most of an example's time.)  Every rank holds the same
    names with a tensor; ``shapes`` gives the whole shapes."""
    group = mesh.get_group("shard")
    ranks = group.size()
    present = [name for name, t in tensors.items() if t is not None]
    chunks = {name: -(-shapes[name][0] // ranks) for name in present}  # Linear parameters: 1-D or 2-D
    rows = {name: math.prod(shapes[name][1:]) for name in present}
    pieces = []
    for name in present:
        local = tensors[name]
        local = local.to_local() if isinstance(local, DTensor) else local
        assert local is not None
        padded = torch.zeros((chunks[name] * rows[name],), dtype=dtype)
        padded[: local.numel()] = local.detach().reshape(-1)
        pieces.append(padded)
    buffer = torch.cat(pieces) if pieces else torch.zeros((0,), dtype=dtype)
    out = torch.empty((ranks * buffer.numel(),), dtype=dtype)
    _ALL_GATHER(out, buffer, group=group)
    out = out.view(ranks, buffer.numel())
    whole: dict[str, torch.Tensor | None] = dict.fromkeys(tensors)
    offset = 0
    for name in present:
        n, width = shapes[name][0], chunks[name] * rows[name]
        parts = [
            out[k, offset : offset + width].reshape(chunks[name], *shapes[name][1:])[: max(0, n - k * chunks[name])]
            for k in range(ranks)
        ]
        whole[name] = torch.cat(parts).clone()
        offset += width
    return whole


def shard(model: nn.Module, config: fst.FSDPConfig, mesh: Any) -> None:
    """Apply ``fully_shard`` as ``config`` says: its groups bottom-up, then the root."""
    kwargs: dict[str, Any] = {
        "mesh": mesh,
        "reshard_after_forward": config.reshard_after_forward,
        "mp_policy": MixedPrecisionPolicy(**config.mp_kwargs()),
    }
    for group in config.shard_groups(model):
        fully_shard(group, **kwargs)
    fully_shard(model, **kwargs)


def fsdp_parity(
    ctx: RankContext,
    config: fst.FSDPConfig,
    dtype: torch.dtype,
    seed: int,
    reduce_scatter: Callable[[], Any] | None = None,
    all_gather: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """On every rank: train ``config``'s model under FSDP2 next to a local reference, checking
    each step (see the module docstring); return the problems and the digests of what was gathered.

    ``reduce_scatter``/``all_gather``, when given, build the FSDP ``ReduceScatter``/``AllGather``
    comm set on every FSDP module (``set_custom_reduce_scatter``/``set_custom_all_gather``).
    """
    if config.world_size != ctx.world_size:
        raise InvalidArgument(
            f"the config is for {config.world_size} ranks; this pool has {ctx.world_size}: "
            f"draw it with fsdp_configs({ctx.world_size})"
        )
    mesh = device_mesh(ctx.device.type, config.mesh_shape)
    model = config.build_model(seed).to(dtype)
    reference = copy.deepcopy(model)  # built before fully_shard touches the values
    shard(model, config, mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            if reduce_scatter is not None:
                module.set_custom_reduce_scatter(reduce_scatter())
            if all_gather is not None:
                module.set_custom_all_gather(all_gather())
    shapes = {name: p.shape for name, p in reference.named_parameters()}
    optimizer = config.build_optimizer(model.parameters())
    ref_optimizer = config.build_optimizer(reference.parameters())
    reduce_in = reduce_dtype(config, dtype)
    problems: list[Problem] = []
    digests: list[Digest] = []

    def check_params(when: str) -> None:
        params = gather(dict(model.named_parameters()), shapes, mesh, dtype)
        digests.append(digest(params))
        ref_params = dict(reference.named_parameters())
        with torch.no_grad():
            for name, param in params.items():
                assert param is not None
                problem = tolerance_problem(
                    f"{when}: param {name}", param, ref_params[name].detach(), *TOLERANCES[dtype]
                )
                if problem is not None:
                    problems.append(problem)
                ref_params[name].copy_(param)  # the next step starts from FSDP's parameters

    for step in range(config.steps):
        check_params("step 0, after fully_shard" if step == 0 else f"before step {step}")
        local = rank_gradients(reference, config, step, seed, dtype)
        loss_of(model, config, ctx.rank, step, seed, dtype).backward()
        grads = gather({name: p.grad for name, p in model.named_parameters()}, shapes, mesh, dtype)
        digests.append(digest(grads))
        for name, grad in grads.items():
            expected = expected_gradient([g[name] for g in local], config.world_size, reduce_in)
            problem = gradient_problem(f"step {step}: grad {name}", grad, expected)
            if problem is not None:
                problems.append(problem)
        for name, p in reference.named_parameters():
            p.grad = grads[name]
        step_together(optimizer, ref_optimizer)
    check_params(f"after {config.steps} steps")
    return {"problems": capped(problems), "digests": digests}


# ---------------------------------------------------------------------------
# the driver-side check


def check_parity(results: list[dict[str, Any]]) -> None:
    """Check in the driver what the ranks' ``fsdp_parity`` returned: raise
    :class:`PropertyFailure` if any rank differs from the reference, or the ranks' gathered
    gradients or parameters are not bitwise equal."""
    fail_on_reported_problems(results, "FSDP differs from the local reference")
    disagreement = first_disagreement(results)
    if disagreement is not None:
        rank, at = disagreement
        raise PropertyFailure(
            f"rank {rank} gathered different values from rank 0 (check #{at}: parameters and gradients alternate)",
            results,
        )


def check(
    pool: Pool,
    config: fst.FSDPConfig,
    dtype: torch.dtype,
    seed: int,
    *,
    reduce_scatter: Callable[[], Any] | None = None,
    all_gather: Callable[[], Any] | None = None,
) -> None:
    """Train ``config``'s model under FSDP2 on ``pool`` next to a local reference; raise
    :class:`PropertyFailure` if gradients or parameters differ from the reference, or across
    ranks.  ``reduce_scatter``/``all_gather``: picklable factories (a class, say) of FSDP comms
    to set on every FSDP module instead of FSDP's default ones."""
    with known_failures("fsdp", config=config, dtype=dtype, seed=seed):
        results = pool.run(fsdp_parity, config, dtype, seed, reduce_scatter=reduce_scatter, all_gather=all_gather)
        check_parity(results)
