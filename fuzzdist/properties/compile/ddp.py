"""DDP under compile: ``torch.compile(ddp_model)`` (Dynamo's ``DDPOptimizer`` splitting the graph at DDP's bucket
boundaries, ``torch._dynamo.config.optimize_ddp``), optionally with compiled autograd, trains as eager DDP does
on the same ranks.  Under compiled autograd DDP runs with Dynamo's Python reducer
(``optimize_ddp="python_reducer"``), as torch's refusal of the C++ reducer under compiled autograd says to.

Models, batches, bucket sizes, ``static_graph`` and the other DDP options are drawn as the DDP parity property
draws them (:func:`fuzzdist.strategies.ddp_configs`).  Every rank trains the same model twice from the same
initial values, eagerly and compiled with the drawn backend (``aot_eager`` or ``inductor``), for the config's
steps, and compares each step's gradients and the final parameters.

The bound: DDP's gradient allreduce is the same bucketed call either way, but the compiled forward and backward
are AOTAutograd's decomposition of the model (``linear``, ``mse_loss`` into their ATen parts) and, under
Inductor, its generated kernels: each may round differently (torch's notes, "Numerical accuracy": results of
different implementations or orders of operations are not bitwise identical).  So gradients and parameters are
compared within the DDP parity property's tolerance for the dtype (:data:`fuzzdist.properties.ddp.TOLERANCES`,
an ``allclose`` bound sized for re-associated sums over a batch of at most 8 and widths of at most 16).

Isolation: constructing a DDP module under ``optimize_ddp="python_reducer"`` changes process-wide state that
nothing undoes (it adds DDP's module to Dynamo's inline list, ``torch._dynamo.trace_rules.LEGACY_MOD_INLINELIST``,
and turns on Inductor's ``_fuse_ddp_communication``); a later DDPOptimizer example with
``find_unused_parameters`` in the same rank process then fails in backward (a torch finding,
``ddp-python-reducer-leaks-inline-rule``, with its reproducer).  So that every example runs as it would in a fresh
process, and a failure shrinks and replays on its own, the compiled run restores that state afterwards
(:func:`_python_reducer_state_restored`).

Recompilation: every example builds a new model, which Dynamo guards on, so each example compiles once; Dynamo's
caches are cleared before each (:func:`fuzzdist.properties.compile.cache.clear`) so that no code object (DDP's
``forward`` is one for every model) collects graphs up to its recompile limit.  A graph break is an event,
as in :mod:`.functional`.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.compile import cache
from fuzzdist.properties.compile.outcomes import fail_on_rank_problems, report_graph_breaks
from fuzzdist.properties.ddp import TOLERANCES
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import mismatch

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

BACKENDS = ("aot_eager", "inductor")
DTYPES = (torch.float32, torch.float64)
SEEDS = seeds()


@dataclass(frozen=True)
class CompiledDDPCase:
    """A DDP ``config`` trained in ``dtype`` from ``seed``, compiled with ``backend`` (and compiled autograd
    where ``compiled_autograd``)."""

    config: fst.DDPConfig
    dtype: torch.dtype = torch.float32
    backend: Any = "aot_eager"
    compiled_autograd: bool = False
    seed: int = 0


@contextlib.contextmanager
def _python_reducer_state_restored() -> Iterator[None]:
    """Restore, on the way out, the process-wide state that DDP's constructor changes under the Python reducer
    (Dynamo's legacy inline list, Inductor's DDP fusion options): see the module docstring."""
    import torch._inductor.config as inductor_config
    from torch._dynamo import trace_rules

    inline = set(trace_rules.LEGACY_MOD_INLINELIST)
    fusion = {name: getattr(inductor_config, name) for name in ("_fuse_ddp_communication", "_fuse_ddp_bucket_size")}
    try:
        yield
    finally:
        trace_rules.LEGACY_MOD_INLINELIST.intersection_update(inline)
        trace_rules.get_legacy_mod_inlinelist.cache_clear()
        for name, value in fusion.items():
            setattr(inductor_config, name, value)


def _train(
    ctx: RankContext, case: CompiledDDPCase, compiled: bool
) -> tuple[list[dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """Train ``case``'s model under DDP, compiled or not: each step's gradients, and the final parameters."""
    config = case.config
    model = config.build_model(case.seed).to(case.dtype)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You passed find_unused_parameters=true", category=UserWarning)
        ddp = DDP(model, process_group=ctx.group, **config.ddp_kwargs())
    run: Any = torch.compile(ddp, backend=case.backend) if compiled else ddp
    optimizer = config.build_optimizer(ddp.parameters())
    grads = []
    for step in range(config.steps):
        inputs, targets = config.make_batch(ctx.rank, step, case.seed)
        loss = nn.functional.mse_loss(run(inputs.to(case.dtype)), targets.to(case.dtype))
        if compiled and case.compiled_autograd:
            with torch._dynamo.compiled_autograd._enable(torch.compile(backend=case.backend)):
                loss.backward()
        else:
            loss.backward()
        grads.append({name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None})
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return grads, {name: p.detach().clone() for name, p in model.named_parameters()}


def within_bound(
    what: str, got: torch.Tensor | None, expected: torch.Tensor | None, dtype: torch.dtype
) -> Problem | None:
    """A problem where ``got`` (compiled) is not within the bound of ``expected`` (eager), or one of them is missing."""
    if got is None or expected is None:
        if got is None and expected is None:
            return None
        return Problem(Kind.MISSING, what, detail="compiled has none" if got is None else "eager has none")
    rtol, atol = TOLERANCES[dtype]
    bound = atol + rtol * expected.abs()
    error = (got - expected).abs()
    return mismatch(what, got, expected, ~(error <= bound), bound, error)


@dataclass(frozen=True)
class DDPOutcome:
    """A rank's problems and the graph breaks compiling met."""

    problems: tuple[Problem, ...]
    breaks: tuple[str, ...]


def ddp_compiled_and_check(ctx: RankContext, case: CompiledDDPCase) -> DDPOutcome:
    """On every rank: train eagerly, then compiled, from the same initial values; compare each step's gradients
    and the final parameters."""
    from torch._dynamo.utils import counters

    cache.clear()  # a new model on DDP's one forward: no code object collects graphs across examples
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    eager_grads, eager_params = _train(ctx, case, compiled=False)
    breaks = dict(counters["graph_break"])
    # compiled autograd refuses DDP's C++ reducer and says to use Dynamo's Python one ("Compiled autograd is not
    # compatible with C++ DDP Reducer, please use torch._dynamo.config.optimize_ddp="python_reducer"")
    optimize_ddp = "python_reducer" if case.compiled_autograd else torch._dynamo.config.optimize_ddp
    with _python_reducer_state_restored(), torch._dynamo.config.patch(optimize_ddp=optimize_ddp):
        grads, params = _train(ctx, case, compiled=True)
    new_breaks = tuple(sorted(r for r, n in counters["graph_break"].items() if n > breaks.get(r, 0)))
    problems: list[Problem | None] = []
    for step, (got, expected) in enumerate(zip(grads, eager_grads, strict=True)):
        for name in sorted(set(got) | set(expected)):
            problems.append(within_bound(f"step {step} grad {name}", got.get(name), expected.get(name), case.dtype))
    for name in sorted(params):
        problems.append(
            within_bound(f"param {name} after {case.config.steps} steps", params[name], eager_params[name], case.dtype)
        )
    dist.barrier(group=ctx.group)
    return DDPOutcome(tuple(copy.copy(p) for p in problems if p is not None), new_breaks)


@st.composite
def compiled_ddp_cases(draw: st.DrawFn, world_size: int, backends: tuple[Any, ...] = BACKENDS) -> CompiledDDPCase:
    """A DDP config as the DDP property draws it (small: 2 layers of width 4 at most, 2 steps), a dtype, a backend
    and whether backward runs under compiled autograd."""
    config = draw(fst.ddp_configs(world_size, max_depth=2, max_width=4, max_batch=4, max_steps=2))
    return CompiledDDPCase(
        config, draw(st.sampled_from(DTYPES)), draw(st.sampled_from(backends)), draw(st.booleans()), draw(SEEDS)
    )


def check(pool: Pool, case: CompiledDDPCase) -> None:
    """Run ``case`` on ``pool``: raise :class:`PropertyFailure` if compiled DDP's gradients or parameters differ
    from eager DDP's beyond the bound on any rank (a failure a known torch bug explains is a sighting, see
    :mod:`.known_bugs`)."""
    with known_failures("compile", case=case):
        outcomes: list[DDPOutcome] = pool.run(ddp_compiled_and_check, case)
        report_graph_breaks(outcomes, "compile ddp")
        fail_on_rank_problems(outcomes, "compiled DDP differs from eager DDP")
