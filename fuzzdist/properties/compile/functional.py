"""Functional collectives in compiled functions: a drawn program computes, compiled, what it computes eagerly
on the same ranks.

A program (:class:`Program`) starts from one input per rank and runs 1 to :data:`MAX_STEPS` steps, each making a
new value from earlier ones: a compute op (``neg``, ``relu``, ``sin``, ``scale``, ``square``, ``add``,
``mul``); the issue of a ``torch.distributed._functional_collectives`` call (``all_reduce``, ``all_gather``,
``reduce_scatter``, ``broadcast``, ``all_to_all_single``), whose result becomes a value only where a later
drawn step ``wait_tensor``s it (so compute can fall between issue and wait); or an in-place c10d call
(``dist.all_reduce``, ``dist.all_gather_into_tensor``, ``dist.reduce_scatter_tensor`` on a copy), which Dynamo
rewrites into the functional ones.  Every rank runs the program eagerly, then compiled with the drawn backend
(``aot_eager``, or ``inductor`` generating CPU C++ code) and Inductor options that move communication
(:data:`INDUCTOR_OPTIONS`: reordering for compute/communication overlap, bucketing all-reduces); every value
and the input afterwards are compared.

The contract, and its bound:

* int64 programs, and any value reached by data movement alone (gathers, broadcasts, all-to-all, copies), are
  exact: compiling changes no value that no floating-point operation made.
* a floating-point value may differ from eager by what Inductor's own kernels may round differently.  torch
  documents that results are not bitwise identical across implementations of an op, nor when operations run
  in another order or fused ("Numerical accuracy", torch's notes, ``docs/source/notes/numerical_accuracy.rst``);
  Inductor generates its own C++ for pointwise ops, which the compiler may contract (a fused multiply-add
  rounds once where eager rounds twice).  So every pointwise op may round by up to :data:`ULPS` units in the
  last place of its result, and an error already in an input propagates by the
  op's Lipschitz bound (``sin``/``neg``/``relu``: 1; ``scale``: its factor; ``square``: ``2|x| + e``;
  ``mul``: ``|a| e_b + |b| e_a + e_a e_b``; ``add``: ``e_a + e_b``).  A collective is the same backend call
  compiled or not, and bucketing or reordering moves where it runs, not its element order: its error is the
  same collective over the inputs' errors (SUM of errors for SUM, their MAX for MAX/MIN, their mean for AVG),
  one rounding of its result added for SUM and AVG.  The eager run propagates each value's bound alongside
  it, in float64, through the same collectives (:func:`run_with_bounds`), so each compared element has its
  own bound.

Graph breaks (a step Dynamo can't trace) are not failures: the driver reports them as Hypothesis events, as
it does the graphs built and compile time.  Recompilation is bounded by :mod:`.cache`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import currently_in_test_context, event
from hypothesis import strategies as st

from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.compile import cache
from fuzzdist.properties.compile.outcomes import fail_on_rank_problems, report_graph_breaks
from fuzzdist.strategies import mix_seed, seeds
from fuzzdist.toolkit.checks import first_difference, mismatch

try:
    import torch.distributed._functional_collectives as fcol
except ImportError as exc:  # pragma: no cover - torch without functional collectives
    raise ImportError(f"torch {torch.__version__} has no torch.distributed._functional_collectives") from exc

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

UNARY = ("neg", "relu", "sin", "scale", "square")
BINARY = ("add", "mul")
INT_OPS = ("neg", "relu", "scale", "add")  # exact on int64 (values stay small: no overflow)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all_single")
IN_PLACE = ("all_reduce", "all_gather", "reduce_scatter")  # the c10d calls Dynamo rewrites
REDUCE_OPS = ("SUM", "MAX", "MIN", "AVG")
DTYPES = (torch.float32, torch.float64, torch.int64)
BACKENDS = ("aot_eager", "inductor")
INDUCTOR_OPTIONS: tuple[tuple[tuple[str, Any], ...], ...] = (
    (),
    (("reorder_for_compute_comm_overlap", True),),
    (("bucket_all_reduces_fx", "all"),),
    (("reorder_for_compute_comm_overlap", True), ("bucket_all_reduces_fx", "all")),
)
"""Inductor options that move communication (each only where the installed torch's Inductor has it)."""
MAX_STEPS = 5
ULPS = 4
"""Units in the last place one compiled pointwise op (or one collective's result) may round differently."""
SCALE = 1.5
SEEDS = seeds()
# all_gather_single is the current name; torch 2.6 has only all_gather_tensor
_ALL_GATHER = getattr(fcol, "all_gather_single", None) or fcol.all_gather_tensor
_REDUCE_SCATTER = getattr(fcol, "reduce_scatter_single", None) or fcol.reduce_scatter_tensor


@dataclass(frozen=True)
class Step:
    """One step: ``kind`` "compute" (``op`` over values ``args``), "issue" (functional collective ``op`` over
    value ``args[0]``, its result pending), "wait" (``wait_tensor`` of the ``args[0]``-th issued result) or
    "c10d" (in-place c10d ``op`` on a copy of value ``args[0]``).  ``reduce_op`` and ``src`` are the
    collective's.  Every step but "issue" makes the next value."""

    kind: str
    op: str
    args: tuple[int, ...]
    reduce_op: str = "SUM"
    src: int = 0


@dataclass(frozen=True)
class Program:
    """``steps`` over one input per rank of ``shape`` and ``dtype``; value 0 is the input."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class CompileCase:
    """A program, compiled with ``backend`` (a name, or a backend function) and Inductor ``options``,
    run on inputs built from ``seed``."""

    program: Program
    backend: Any = "aot_eager"
    options: tuple[tuple[str, Any], ...] = ()
    seed: int = 0


@dataclass(frozen=True)
class Outcome:
    """What a rank saw: its problems, and what compiling took (for the driver's events)."""

    problems: tuple[Problem, ...]
    compile_s: float
    graphs: int
    breaks: tuple[str, ...]
    cached: bool


# ---------------------------------------------------------------------------
# on the ranks


def rank_input(program: Program, rank: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s input: small values (normal floats; integers in [-8, 8)), the same in every process."""
    gen = torch.Generator().manual_seed(mix_seed(seed, rank) % 2**63)
    if program.dtype.is_floating_point:
        return torch.randn(program.shape, generator=gen, dtype=torch.float64).to(program.dtype)
    return torch.randint(-8, 8, program.shape, generator=gen, dtype=program.dtype)


def compute_op(op: str, xs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Compute op ``op`` (of :data:`UNARY` and :data:`BINARY`) over ``xs``."""
    a = xs[0]
    if op == "neg":
        return -a
    if op == "relu":
        return torch.relu(a)
    if op == "sin":
        return torch.sin(a)
    if op == "scale":
        return a * (SCALE if a.is_floating_point() else 3)
    if op == "square":
        return a * a
    if op == "add":
        return a + xs[1]
    return a * xs[1]  # mul


def _issue(step: Step, x: torch.Tensor, group: Any) -> torch.Tensor:
    if step.op == "all_reduce":
        return fcol.all_reduce(x, step.reduce_op.lower(), group)
    if step.op == "all_gather":
        return _ALL_GATHER(x, 0, group)
    if step.op == "reduce_scatter":
        return _REDUCE_SCATTER(x, step.reduce_op.lower(), 0, group)
    if step.op == "broadcast":
        return fcol.broadcast(x, step.src, group)
    return fcol.all_to_all_single(x, None, None, group)


def _c10d(step: Step, x: torch.Tensor, group: Any) -> torch.Tensor:
    op = getattr(dist.ReduceOp, step.reduce_op)
    if step.op == "all_reduce":
        out = x.clone()
        dist.all_reduce(out, op=op, group=group)
        return out
    world = dist.get_world_size(group)
    if step.op == "all_gather":
        out = x.new_empty((x.shape[0] * world, *x.shape[1:]))
        dist.all_gather_into_tensor(out, x, group=group)
        return out
    out = x.new_empty((x.shape[0] // world, *x.shape[1:]))
    dist.reduce_scatter_tensor(out, x, op=op, group=group)
    return out


def run_program(steps: tuple[Step, ...], x: torch.Tensor, group: Any) -> list[torch.Tensor]:
    """The program: every value it makes, in order (value 0, the input, left out).  Compiled as it is."""
    values = [x]
    pending = []
    for step in steps:
        if step.kind == "compute":
            values.append(compute_op(step.op, [values[i] for i in step.args]))
        elif step.kind == "issue":
            pending.append(_issue(step, values[step.args[0]], group))
        elif step.kind == "wait":
            values.append(fcol.wait_tensor(pending[step.args[0]]))
        else:
            values.append(_c10d(step, values[step.args[0]], group))
    return values[1:]


def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


def compute_bound(
    op: str, xs: Sequence[torch.Tensor], bs: Sequence[torch.Tensor], out: torch.Tensor, ulp: float
) -> torch.Tensor:
    """The error bound of ``op``'s result: its inputs' errors propagated, plus one rounding of its own."""
    a, ea = xs[0].double().abs(), bs[0]
    if op in ("neg", "relu", "sin"):
        prop = ea
    elif op == "scale":
        prop = ea * SCALE
    elif op == "square":
        prop = 2 * a * ea + ea * ea
    elif op == "add":
        prop = ea + bs[1]
    else:  # mul
        b, eb = xs[1].double().abs(), bs[1]
        prop = a * eb + b * ea + ea * eb
    return prop + ulp * out.double().abs()


def _bound_of_collective(step: Step, b: torch.Tensor, out: torch.Tensor, group: Any, ulp: float) -> torch.Tensor:
    """The same collective over the input's error bound (float64): data movement moves the errors; a SUM
    adds them, MAX/MIN take their largest, AVG their mean; SUM and AVG round their result once more."""
    reduce_op = step.reduce_op
    as_op = "MAX" if reduce_op in ("MAX", "MIN") else "SUM"
    same = dataclasses.replace(step, reduce_op=as_op)
    moved = _c10d(same, b, group) if step.kind == "c10d" else fcol.wait_tensor(_issue(same, b, group))
    if step.op in ("all_reduce", "reduce_scatter"):
        if reduce_op == "AVG":
            moved = moved / dist.get_world_size(group)
        if reduce_op in ("SUM", "AVG"):
            moved = moved + ulp * out.double().abs()
    return moved


def run_with_bounds(
    steps: tuple[Step, ...], x: torch.Tensor, group: Any
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The program eagerly, and each value's error bound alongside (float64, per element): what a compiled
    run may differ by (see the module's docstring)."""
    ulp = ULPS * _eps(x.dtype)
    values, bounds = [x], [torch.zeros(x.shape, dtype=torch.float64)]
    pending: list[tuple[torch.Tensor, Step, torch.Tensor]] = []
    for step in steps:
        if step.kind == "compute":
            xs = [values[i] for i in step.args]
            out = compute_op(step.op, xs)
            values.append(out)
            bounds.append(compute_bound(step.op, xs, [bounds[i] for i in step.args], out, ulp))
        elif step.kind == "issue":
            pending.append((_issue(step, values[step.args[0]], group), step, bounds[step.args[0]]))
        elif step.kind == "wait":
            result, issued, b = pending[step.args[0]]
            out = fcol.wait_tensor(result)
            values.append(out)
            bounds.append(_bound_of_collective(issued, b, out, group, ulp))
        else:
            out = _c10d(step, values[step.args[0]], group)
            values.append(out)
            bounds.append(_bound_of_collective(step, bounds[step.args[0]], out, group, ulp))
    return values[1:], bounds[1:]


def compare(what: str, compiled: torch.Tensor, eager: torch.Tensor, bound: torch.Tensor) -> Problem | None:
    """None if ``compiled`` is ``eager`` within ``bound`` per element (exact where the bound is 0; NaN where
    eager is NaN); else the problem."""
    if tuple(compiled.shape) != tuple(eager.shape) or compiled.dtype != eager.dtype:
        return Problem(
            Kind.SHAPE, what, got=(tuple(compiled.shape), compiled.dtype), expected=(tuple(eager.shape), eager.dtype)
        )
    if not eager.is_floating_point():
        return first_difference(compiled, eager, what)
    diff = (compiled.double() - eager.double()).abs()
    nan = eager.isnan()
    bad = torch.where(nan, ~compiled.isnan(), ~(diff <= bound))
    if not bool(bad.any()):
        return None
    return mismatch(what, compiled, eager, bad, bound, diff)


def _with_options(options: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """``options`` that the installed torch's Inductor has (an option it lacks is left out)."""
    import torch._inductor.config as inductor_config

    return {name: value for name, value in options if hasattr(inductor_config, name)}


def compile_and_check(ctx: RankContext, case: CompileCase) -> Outcome:
    """On every rank: run the program eagerly (with its bounds), then compiled (built once per structure:
    :mod:`.cache`), and compare every value and the input afterwards."""
    program = case.program
    x = rank_input(program, ctx.rank, case.seed)
    group = ctx.group
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the deprecated *_tensor aliases say so
        eager, bounds = run_with_bounds(program.steps, x.clone(), group)
        options = _with_options(case.options) if case.backend == "inductor" else None
        key = (program, case.backend, tuple(sorted((options or {}).items())))
        entry = cache.compiled(key, run_program, case.backend, options)
        cached = entry.called
        got = cache.call(entry, program.steps, x, group)
    problems = [compare(f"value {i + 1}", c, e, b) for i, (c, e, b) in enumerate(zip(got, eager, bounds, strict=True))]
    problems.append(first_difference(x, rank_input(program, ctx.rank, case.seed), "the input afterwards"))
    return Outcome(tuple(p for p in problems if p is not None), entry.compile_s, entry.graphs, entry.breaks, cached)


# ---------------------------------------------------------------------------
# strategies


def _fits(op: str, shape: tuple[int, ...], world: int) -> bool:
    """Whether collective ``op`` takes a value of ``shape`` (scatters split dim 0 evenly)."""
    return op not in ("reduce_scatter", "all_to_all_single") or shape[0] % world == 0


def _out_shape(op: str, shape: tuple[int, ...], world: int) -> tuple[int, ...]:
    if op == "all_gather":
        return (shape[0] * world, *shape[1:])
    if op == "reduce_scatter":
        return (shape[0] // world, *shape[1:])
    return shape


@st.composite
def programs(draw: st.DrawFn, world_size: int, max_steps: int = MAX_STEPS) -> Program:
    """Programs of 1 to ``max_steps`` steps over a (world * k, m) input (k in 1..2, m in 1..3: few shapes,
    so few compiles); shrinks to one ``neg`` of a (world, 1) float32 input."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = (world_size * draw(st.integers(1, 2)), draw(st.integers(1, 3)))
    shapes: list[tuple[int, ...]] = [shape]
    pending: list[tuple[int, tuple[int, ...]]] = []  # (issue index, result shape) not yet waited
    issued = 0
    steps: list[Step] = []
    compute_ops = UNARY + BINARY if dtype.is_floating_point else INT_OPS
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(("compute", "issue", "wait", "c10d")))
        if kind == "wait" and not pending:
            kind = "compute"
        if kind == "compute":
            op = draw(st.sampled_from(compute_ops))
            a = draw(st.integers(0, len(shapes) - 1))
            args: tuple[int, ...] = (a,)
            if op in BINARY:
                same = [i for i, s in enumerate(shapes) if s == shapes[a]]
                args = (a, draw(st.sampled_from(same)))
            steps.append(Step("compute", op, args))
            shapes.append(shapes[a])
            continue
        if kind == "wait":
            k = draw(st.integers(0, len(pending) - 1))
            index, out = pending.pop(k)
            steps.append(Step("wait", "wait_tensor", (index,)))
            shapes.append(out)
            continue
        ops = COLLECTIVES if kind == "issue" else IN_PLACE
        a = draw(st.integers(0, len(shapes) - 1))
        op = draw(st.sampled_from([o for o in ops if _fits(o, shapes[a], world_size)]))
        reduce_op = (
            draw(st.sampled_from(REDUCE_OPS if dtype.is_floating_point else REDUCE_OPS[:3]))
            if op in ("all_reduce", "reduce_scatter")
            else "SUM"
        )
        src = draw(st.integers(0, world_size - 1)) if op == "broadcast" else 0
        steps.append(Step(kind, op, (a,), reduce_op, src))
        if kind == "issue":
            pending.append((issued, _out_shape(op, shapes[a], world_size)))
            issued += 1
        else:
            shapes.append(_out_shape(op, shapes[a], world_size))
    for index, _ in pending:  # what is still pending is waited at the end
        steps.append(Step("wait", "wait_tensor", (index,)))
    return Program(shape, dtype, tuple(steps))


@st.composite
def compile_cases(draw: st.DrawFn, world_size: int, backends: Sequence[Any] = BACKENDS) -> CompileCase:
    """A program, a backend of ``backends`` and (for Inductor) options that move communication, a seed."""
    program = draw(programs(world_size))
    backend = draw(st.sampled_from(tuple(backends)))
    options = draw(st.sampled_from(INDUCTOR_OPTIONS)) if backend == "inductor" else ()
    return CompileCase(program, backend, options, draw(SEEDS))


# ---------------------------------------------------------------------------
# the driver-side check


def report(outcomes: Sequence[Outcome]) -> None:
    """Hypothesis events for what compiling did: cache hits, graph breaks (not failures), graphs built (outside
    a Hypothesis test, as when ``check`` is called directly, nothing)."""
    if not currently_in_test_context():
        return
    first = outcomes[0]
    event("compile: cached graph" if first.cached else "compile: new graph")
    event(f"compile: {first.graphs} graph(s)" if not first.cached else "compile: graphs reused")
    report_graph_breaks(outcomes, "compile")


def check(pool: Pool, case: CompileCase, *, run: Callable[..., Outcome] = compile_and_check) -> None:
    """Run ``case`` on ``pool``: raise :class:`PropertyFailure` if any rank's compiled values differ from its
    eager ones beyond the bound (or its input changed)."""
    outcomes: list[Outcome] = pool.run(run, case)
    report(outcomes)
    fail_on_rank_problems(outcomes, "compiled program differs from eager")
