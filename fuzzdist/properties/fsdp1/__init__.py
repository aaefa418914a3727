"""FSDP1 parity: ``FullyShardedDataParallel``'s gradients and parameters match a local model's, step by
step, and its state dicts round-trip into a fresh FSDP model that then trains identically.

Modules: ``config`` (``FSDP1Config`` and the ``fsdp1_configs`` strategy), ``known_bugs`` (the torch
bugs this family runs into).

For any setup :func:`~fuzzdist.properties.fsdp1.config.fsdp1_configs` draws, on CPU ranks over gloo
(torch 2.13 runs FSDP1 there: every ``ShardingStrategy``, ``HYBRID_SHARD`` given its
(shard, replicate) process groups, mixed precision, prefetching, ``no_sync``; not ``sync_module_states`` or CPU offload,
which it refuses on CPU: see ``fsdp1_configs``), at every one of ``config.steps`` optimizer steps:

* before the step, the full parameters (``FSDP.summon_full_params``) equal the local reference's:
  at step 0 the model as built;
* after backward (of two micro-batches with ``no_sync``, the first inside it: "gradients will be
  accumulated in module variables, which will later be synchronized in the first forward-backward
  pass after exiting the context"), the full gradients equal the mean over ranks of each rank's
  local gradient, computed on a local model without communication;
* full gradients and parameters are bitwise equal on every rank.

After the steps, the model's ``state_dict()`` and ``FSDP.optim_state_dict`` under the drawn
``StateDictType`` are loaded (``load_state_dict``, ``FSDP.optim_state_dict_to_load``; the optimizer
state as a copy, as from a checkpoint) into a fresh FSDP model of the same setup built from other
values; its full parameters must then equal the original's bitwise, and after one more step of both,
again bitwise.

Gradient tolerance, derived.  FSDP1's ``MixedPrecision`` documents: "param_dtype specifies the dtype
for the unsharded FlatParameter and hence the dtype for forward/backward computation"; "reduce_dtype
... for gradient reduction"; "If reduce_dtype is None but param_dtype is not None, then this takes
on the param_dtype value, still running gradient reduction in low precision"; the root "casts its
forward args and kwargs to param_dtype" (``cast_root_forward_inputs``).  The reference computes each
rank's local gradient exactly so (``fuzzdist.properties.fsdp.compute_model``: parameters and the
units' inputs in ``param_dtype``), which leaves the reduction: the cast to the reduce dtype R, a
pre-division, W - 1 additions (reduce-scatter, or all-reduce over NO_SHARD's and HYBRID_SHARD's
replicas), a post-division and the cast back: at most W + 3 roundings in R, each within R's eps
relative to the terms: the same bound as FSDP2's (``fuzzdist.properties.fsdp.expected_gradient``),
which no lost or doubled contribution fits into.  Parameters compare within
``torch.testing.assert_close``'s default tolerance of the model's dtype, the reference resynchronised
to FSDP's after each check (as in the FSDP2 property: a last-bit difference must not be amplified
into a false failure steps later).

How gradients are read.  With ``use_orig_params=True``, ``summon_full_params(with_grads=True)``
("If True, gradients are also unsharded with the parameters. Currently, this is only supported when
passing use_orig_params=True"); without, each FSDP unit's ``FlatParameter`` gradient shard is
all-gathered over the unit's process group and split along its documented ``_fqns``/``_numels``
(torch's torch/distributed/fsdp/_flat_param.py: "the flat parameter's ... original parameters'
fully-qualified names, shapes and numels").

The reduction is swappable: ``check(..., comm_hook=factory)`` registers ``factory(process_group)``'s
``(state, hook)`` with ``FSDP.register_comm_hook`` on the root (a sharded strategy calls ``hook(state,
grad, output)``, NO_SHARD ``hook(state, grad)``).  Importing this module raises ImportError where torch
has no FSDP1.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch import nn

from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem, Symptom, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties.fsdp import TOLERANCES, compute_model, device_mesh, expected_gradient, reduce_dtype
from fuzzdist.properties.fsdp1.config import FSDP1Config
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import Digest, digest, keyed_differences, mismatch, tolerance_problem
from fuzzdist.toolkit.models import step_together
from fuzzdist.toolkit.reporting import capped

try:
    from torch.distributed.fsdp import (
        BackwardPrefetch,
        MixedPrecision,
        ShardingStrategy,
        StateDictType,
    )
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
except ImportError as exc:  # pragma: no cover - a torch without FSDP1
    raise ImportError(f"torch {torch.__version__} has no torch.distributed.fsdp.FullyShardedDataParallel") from exc

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

__all__ = ["DTYPES", "SEEDS", "check", "check_results", "fsdp1_parity", "wrap"]

SEEDS = seeds()
DTYPES = st.sampled_from([torch.float32, torch.float64])  # the model's (full-precision parameters') dtype
_PREFIX = "_fsdp_wrapped_module."
_OTHER_SEED = 0x5EED  # added to the seed for a model whose values must differ from the reference's
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

CommHook = Callable[[dist.ProcessGroup], tuple[Any, Callable[..., Any]]]


def _clean(name: str) -> str:
    """An FSDP parameter or module name as the unwrapped model names it."""
    return name.replace(_PREFIX, "")


def wrap(model: nn.Module, config: FSDP1Config, ctx: RankContext) -> FSDP:
    """``model`` wrapped in FSDP1 as ``config`` says, over the pool's group (or, for HYBRID_SHARD,
    a (replicate, shard) device mesh)."""
    kwargs: dict[str, Any] = {
        "sharding_strategy": ShardingStrategy[config.sharding_strategy],
        "use_orig_params": config.use_orig_params,
        "auto_wrap_policy": ModuleWrapPolicy({nn.Linear}) if config.auto_wrap else None,
        "backward_prefetch": BackwardPrefetch[config.backward_prefetch] if config.backward_prefetch else None,
        "forward_prefetch": config.forward_prefetch,
        "device_id": torch.device("cpu"),
    }
    if config.mixed_precision:
        kwargs["mixed_precision"] = MixedPrecision(param_dtype=config.param_dtype, reduce_dtype=config.reduce_dtype)
    if config.hybrid_mesh is not None:
        # The documented tuple (shard group, replicate group), not ``device_mesh``: FSDP1 refuses
        # LOCAL_STATE_DICT on a device mesh ("DeviceMesh is not compatible with LOCAL_STATE_DICT").
        mesh = device_mesh(ctx.device.type, config.hybrid_mesh)
        kwargs["process_group"] = (mesh.get_group("shard"), mesh.get_group("replicate"))
    else:
        kwargs["process_group"] = ctx.group
    return FSDP(model, **kwargs)


def full_params(model: FSDP) -> dict[str, torch.Tensor]:
    """The full (unsharded, full-precision) parameters, by the unwrapped model's names."""
    with FSDP.summon_full_params(model):
        return {_clean(name): p.detach().clone() for name, p in model.named_parameters()}


def _flat_param_grads(model: FSDP) -> dict[str, torch.Tensor | None]:
    """The full gradients of a ``use_orig_params=False`` model: each unit's FlatParameter gradient
    shard all-gathered over the unit's group and split along the flat parameter's own metadata."""
    grads: dict[str, torch.Tensor | None] = {}
    for module_name, module in model.named_modules():
        handle = getattr(module, "_handle", None) if isinstance(module, FSDP) else None
        if handle is None:
            continue
        flat = handle.flat_param
        shard = flat.grad if flat.grad is not None else torch.zeros_like(flat)
        if handle.uses_sharded_strategy:
            group = module.process_group
            whole = torch.empty(shard.numel() * group.size(), dtype=shard.dtype)
            _ALL_GATHER(whole, shard.detach().contiguous(), group=group)
        else:
            whole = shard.detach()
        prefix = _clean(module_name)
        offset = 0
        for fqn, shape, numel in zip(flat._fqns, flat._shapes, flat._numels, strict=True):
            name = f"{prefix}.{fqn}" if prefix else fqn
            grads[_clean(name)] = None if flat.grad is None else whole[offset : offset + numel].view(shape).clone()
            offset += numel
    return grads


def full_grads(model: FSDP, config: FSDP1Config) -> dict[str, torch.Tensor | None]:
    """The full gradients, by the unwrapped model's names (see the module docstring for how)."""
    if config.use_orig_params:
        with FSDP.summon_full_params(model, with_grads=True):
            return {
                _clean(name): None if p.grad is None else p.grad.detach().clone()
                for name, p in model.named_parameters()
            }
    return _flat_param_grads(model)


def _loss(
    model: nn.Module, config: FSDP1Config, rank: int, step: int, micro: int, seed: int, dtype: torch.dtype
) -> torch.Tensor:
    inputs, targets = config.make_batch(rank, step, micro, seed)
    return nn.functional.mse_loss(model(inputs.to(dtype)), targets.to(dtype))


def local_gradients(
    reference: nn.Module, config: FSDP1Config, step: int, seed: int, dtype: torch.dtype
) -> list[dict[str, torch.Tensor | None]]:
    """Each rank's local gradient at ``step`` (its micro-batches' gradients accumulated by autograd, in
    the compute dtype), from one local model with no communication."""
    model = compute_model(reference, config.reference_config())
    grads = []
    for rank in range(config.world_size):
        model.zero_grad(set_to_none=True)
        for micro in range(config.micro_batches):
            _loss(model, config, rank, step, micro, seed, dtype).backward()
        grads.append(
            {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}
        )
    return grads


def _gradient_problem(
    what: str, actual: torch.Tensor | None, expected: tuple[torch.Tensor, torch.Tensor] | None
) -> Problem | None:
    if expected is None:
        return (
            None
            if actual is None or not bool(actual.any())
            else Problem(Kind.MISMATCH, what, detail="got a non-zero gradient where no rank has one")
        )
    mean, bound = expected
    if actual is None:
        return Problem(Kind.MISSING, what, detail="no gradient, where the ranks' local gradients are not all None")
    if tuple(actual.shape) != tuple(mean.shape):
        return Problem(Kind.SHAPE, what, got=tuple(actual.shape), expected=tuple(mean.shape))
    error = (actual.double() - mean).abs()
    return mismatch(what, actual, mean, ~(error <= bound), bound, error)  # NaN counts as bad


def train_step(
    model: FSDP,
    optimizer: torch.optim.Optimizer,
    config: FSDP1Config,
    rank: int,
    step: int,
    seed: int,
    dtype: torch.dtype,
) -> None:
    """Forward and backward of ``step``'s micro-batches (all but the last inside ``no_sync()``)."""
    for micro in range(config.micro_batches):
        if micro < config.micro_batches - 1:
            with model.no_sync():
                _loss(model, config, rank, step, micro, seed, dtype).backward()
        else:
            _loss(model, config, rank, step, micro, seed, dtype).backward()


def _round_trip(
    ctx: RankContext,
    model: FSDP,
    optimizer: torch.optim.Optimizer,
    config: FSDP1Config,
    seed: int,
    dtype: torch.dtype,
    comm_hook: CommHook | None,
) -> list[Problem]:
    """Save ``model``'s and ``optimizer``'s state with the drawn state-dict type, load both into a fresh
    FSDP model, and compare the two after the load and after one more step, bitwise."""
    kind = StateDictType[config.state_dict_type]
    with FSDP.state_dict_type(model, kind):
        model_state = model.state_dict()
        # A copy, as a checkpoint on disk would be: NO_SHARD's ``optim_state_dict`` of a use_orig_params
        # model holds the optimizer's own state tensors (as ``Optimizer.state_dict`` does), and
        # ``Optimizer.load_state_dict`` keeps them ("shallow copy, to be consistent with module API"), so
        # without one the two optimizers would step the same ``exp_avg`` in place, each twice.
        optim_state = copy.deepcopy(FSDP.optim_state_dict(model, optimizer))
    fresh = wrap(config.build_model(seed + _OTHER_SEED).to(dtype), config, ctx)
    _register(fresh, comm_hook)
    fresh_optimizer = config.build_optimizer(fresh.parameters())
    with FSDP.state_dict_type(fresh, kind):
        fresh.load_state_dict(model_state)
        fresh_optimizer.load_state_dict(FSDP.optim_state_dict_to_load(fresh, fresh_optimizer, optim_state))
    problems = _same(full_params(fresh), full_params(model), f"after loading a {config.state_dict_type}")
    for net, opt in ((model, optimizer), (fresh, fresh_optimizer)):
        train_step(net, opt, config, ctx.rank, config.steps, seed, dtype)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return problems + _same(
        full_params(fresh), full_params(model), f"one step after loading a {config.state_dict_type}"
    )


def _same(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], when: str) -> list[Problem]:
    return keyed_differences(
        got, expected, lambda name: f"{when}: param {name}", lambda name: f"{when}: param {name} (the fresh model's)"
    )


def _register(model: FSDP, comm_hook: CommHook | None) -> None:
    if comm_hook is not None:
        assert model.process_group is not None, "an FSDP1 module always has its process group"
        state, hook = comm_hook(model.process_group)
        model.register_comm_hook(state, hook)


def fsdp1_parity(
    ctx: RankContext, config: FSDP1Config, dtype: torch.dtype, seed: int, comm_hook: CommHook | None = None
) -> dict[str, Any]:
    """On every rank: train ``config``'s model under FSDP1 next to a local reference, checking each step,
    then round-trip its state dict (see the module docstring); return the problems and the digests of
    what was gathered."""
    if config.world_size != ctx.world_size:
        raise InvalidArgument(
            f"the config is for {config.world_size} ranks; this pool has {ctx.world_size}: "
            f"draw it with fsdp1_configs({ctx.world_size})"
        )
    reference = config.build_model(seed).to(dtype)
    model = wrap(config.build_model(seed).to(dtype), config, ctx)
    _register(model, comm_hook)
    optimizer = config.build_optimizer(model.parameters())
    ref_optimizer = config.build_optimizer(reference.parameters())
    reduce_in = reduce_dtype(config.reference_config(), dtype)
    problems: list[Problem] = []
    digests: list[Digest] = []

    def check_params(when: str) -> None:
        params = full_params(model)
        digests.append(digest(params))
        with torch.no_grad():
            for name, ref in reference.named_parameters():
                if name not in params:
                    problems.append(Problem(Kind.MISSING, f"{when}: param {name}"))
                    continue
                problem = tolerance_problem(f"{when}: param {name}", params[name], ref.detach(), *TOLERANCES[dtype])
                if problem is not None:
                    problems.append(problem)
                ref.copy_(params[name])  # the next step starts from FSDP's parameters

    for step in range(config.steps):
        check_params("step 0, after wrapping" if step == 0 else f"before step {step}")
        local = local_gradients(reference, config, step, seed, dtype)
        train_step(model, optimizer, config, ctx.rank, step, seed, dtype)
        grads = full_grads(model, config)
        digests.append(digest(grads))
        for name, ref in reference.named_parameters():
            expected = expected_gradient([g[name] for g in local], config.world_size, reduce_in)
            problem = _gradient_problem(f"step {step}: grad {name}", grads.get(name), expected)
            if problem is not None:
                problems.append(problem)
            ref.grad = grads.get(name)
        step_together(optimizer, ref_optimizer)
    check_params(f"after {config.steps} steps")
    problems.extend(_round_trip(ctx, model, optimizer, config, seed, dtype, comm_hook))
    return {"problems": capped(problems), "digests": digests}


def check_results(results: list[dict[str, Any]]) -> None:
    """Check in the driver what the ranks' ``fsdp1_parity`` returned: raise :class:`PropertyFailure` if
    any rank found a problem, or the ranks' full gradients or parameters are not bitwise equal."""
    wrong = {rank: obs["problems"] for rank, obs in enumerate(results) if obs["problems"]}
    if wrong:
        raise PropertyFailure(
            f"FSDP1 differs from the local reference on ranks {sorted(wrong)}:{by_rank(wrong)}",
            results,
            [p for rank in sorted(wrong) for p in wrong[rank]],
        )
    first = results[0]["digests"]
    for rank, obs in enumerate(results):
        if obs["digests"] != first:
            at = next(i for i, (a, b) in enumerate(zip(obs["digests"], first, strict=False)) if a != b)
            raise PropertyFailure(
                f"rank {rank} holds different full values from rank 0 (check #{at}: parameters "
                "and gradients alternate)",
                results,
                [Problem(Kind.MISMATCH, f"check #{at}", rank=rank, symptom=Symptom.RANKS_DIFFER)],
            )


def check(pool: Pool, config: FSDP1Config, dtype: torch.dtype, seed: int, *, comm_hook: CommHook | None = None) -> None:
    """Train ``config``'s model under FSDP1 on ``pool`` next to a local reference and round-trip its state
    dict; raise :class:`PropertyFailure` if gradients or parameters differ from the reference, across
    ranks, or after the round trip.  ``comm_hook``: a picklable factory ``(process_group) -> (state,
    hook)`` registered with ``FSDP.register_comm_hook`` instead of FSDP's default reduction."""
    with known_failures("fsdp1", config=config, dtype=dtype, seed=seed):
        check_results(pool.run(fsdp1_parity, config, dtype, seed, comm_hook=comm_hook))
