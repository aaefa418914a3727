"""FSDP2 under compile: a ``fully_shard`` model run through ``torch.compile`` trains as the same model run
eagerly, on the same ranks.

Models, meshes (1-D and HSDP), sharding groups, ``reshard_after_forward``, batches and optimizers are drawn as
the FSDP2 parity property draws them (:func:`fuzzdist.strategies.fsdp_configs`), without mixed precision (see
below).  Every rank shards two copies of the same model with :func:`fuzzdist.properties.fsdp.shard`, trains one
eagerly and one compiled with the drawn backend (``aot_eager`` or ``inductor``) for the config's steps, and
compares each step's gathered gradients and the gathered parameters at the end.

What compiling changes: FSDP2 wraps its hooks (all-gather before a module's forward, reduce-scatter after its
backward) in ``torch._dynamo.disable`` ("Disable dynamo tracing for FSDP hooks",
``torch/distributed/fsdp/_fully_shard/_fsdp_common.py``), so Dynamo breaks the graph at each one and the
collectives run eagerly, the same calls either way; the graph breaks are reported as events, not failures.
What is compiled is each module's compute between them: AOTAutograd's decomposition of ``linear`` and
``mse_loss`` and, under Inductor, its generated kernels, each of which may round differently from eager's
(torch's notes, "Numerical accuracy": results of different implementations or orders of operations are not
bitwise identical).  That is the DDP case's bound again (:mod:`.ddp`): gradients and parameters within
:data:`fuzzdist.properties.ddp.TOLERANCES` of the eager ones, an ``allclose`` bound sized for re-associated
sums over a batch of at most 8 and widths of at most 16 (here at most 4 and 4).

Mixed precision is left out: with a bfloat16 or float16 ``param_dtype`` the compiled graph decides where
values are rounded to the low precision (Inductor "will elide the downcast-upcast pairs" between fused low
precision operators unless ``emulate_precision_casts`` is set, that option's comment in
``torch/_inductor/config.py``), so compiled and eager differ by roundings in the low dtype that the bound above
does not cover; the float32 and float64 models keep it.

Recompilation: each example builds new models, which Dynamo guards on, so each compiles once; Dynamo's caches
are cleared before each (:func:`fuzzdist.properties.compile.cache.clear`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Problem
from fuzzdist.properties import fsdp as fsdp_parity
from fuzzdist.properties.compile import cache
from fuzzdist.properties.compile.ddp import BACKENDS, DTYPES, within_bound
from fuzzdist.properties.compile.outcomes import fail_on_rank_problems, report_graph_breaks
from fuzzdist.strategies import seeds

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

SEEDS = seeds()


@dataclass(frozen=True)
class CompiledFSDPCase:
    """An FSDP2 ``config`` trained in ``dtype`` from ``seed``, compiled with ``backend``."""

    config: fst.FSDPConfig
    dtype: torch.dtype = torch.float32
    backend: Any = "aot_eager"
    seed: int = 0


@dataclass(frozen=True)
class FSDPOutcome:
    """A rank's problems and the graph breaks compiling met."""

    problems: tuple[Problem, ...]
    breaks: tuple[str, ...]


def _train(
    ctx: RankContext, case: CompiledFSDPCase, mesh: Any, compiled: bool
) -> tuple[list[dict[str, torch.Tensor | None]], dict[str, torch.Tensor | None]]:
    """Train ``case``'s model under FSDP2, compiled or not: each step's gathered gradients, and the gathered
    parameters at the end."""
    config = case.config
    model = config.build_model(case.seed).to(case.dtype)
    shapes = {name: p.shape for name, p in model.named_parameters()}
    fsdp_parity.shard(model, config, mesh)
    run: Any = torch.compile(model, backend=case.backend) if compiled else model
    optimizer = config.build_optimizer(model.parameters())
    grads = []
    for step in range(config.steps):
        fsdp_parity.loss_of(run, config, ctx.rank, step, case.seed, case.dtype).backward()
        grads.append(fsdp_parity.gather({n: p.grad for n, p in model.named_parameters()}, shapes, mesh, case.dtype))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return grads, fsdp_parity.gather(dict(model.named_parameters()), shapes, mesh, case.dtype)


def fsdp_compiled_and_check(ctx: RankContext, case: CompiledFSDPCase) -> FSDPOutcome:
    """On every rank: train eagerly, then compiled, from the same initial values; compare each step's gradients
    and the final parameters."""
    from torch._dynamo.utils import counters

    cache.clear()  # new modules every example: no code object collects graphs across examples
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    mesh = fsdp_parity.device_mesh(ctx.device.type, case.config.mesh_shape)
    eager_grads, eager_params = _train(ctx, case, mesh, compiled=False)
    breaks = dict(counters["graph_break"])
    grads, params = _train(ctx, case, mesh, compiled=True)
    new_breaks = tuple(sorted(r for r, n in counters["graph_break"].items() if n > breaks.get(r, 0)))
    problems: list[Problem | None] = []
    for step, (got, expected) in enumerate(zip(grads, eager_grads, strict=True)):
        for name in sorted(got):
            problems.append(within_bound(f"step {step} grad {name}", got[name], expected[name], case.dtype))
    for name in sorted(params):
        after = f"param {name} after {case.config.steps} steps"
        problems.append(within_bound(after, params[name], eager_params[name], case.dtype))
    dist.barrier(group=ctx.group)
    return FSDPOutcome(tuple(copy.copy(p) for p in problems if p is not None), new_breaks)


@st.composite
def compiled_fsdp_cases(draw: st.DrawFn, world_size: int, backends: tuple[Any, ...] = BACKENDS) -> CompiledFSDPCase:
    """An FSDP2 config as the FSDP2 property draws it (small: 2 layers of width 4 at most, 2 steps, no mixed
    precision), a dtype and a backend."""
    config = draw(
        fst.fsdp_configs(world_size, max_depth=2, max_width=4, max_batch=4, max_steps=2, mixed_precision=False)
    )
    return CompiledFSDPCase(config, draw(st.sampled_from(DTYPES)), draw(st.sampled_from(backends)), draw(SEEDS))


def check(pool: Pool, case: CompiledFSDPCase) -> None:
    """Run ``case`` on ``pool``: raise :class:`PropertyFailure` if the compiled FSDP2 model's gradients or
    parameters differ from the eager one's beyond the bound on any rank."""
    with known_failures("compile", case=case):
        outcomes: list[FSDPOutcome] = pool.run(fsdp_compiled_and_check, case)
        report_graph_breaks(outcomes, "compile fsdp")
        fail_on_rank_problems(outcomes, "compiled FSDP2 differs from eager FSDP2")
