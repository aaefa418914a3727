"""DTensor programs under compile: a drawn chain of DTensor operators computes, compiled, what it computes
eagerly on the same ranks.

A program (:class:`DTensorProgram`) starts from one DTensor on the 1-D mesh of every rank, a 2-D tensor of a
drawn shape (dims of 1 to :data:`MAX_DIM`, so shards that don't divide and empty shards) and dtype, placed
``Shard(0)``, ``Shard(1)`` or ``Replicate()``, and runs 1 to :data:`MAX_STEPS` steps, each making a new value
from earlier ones:

* a pointwise op of the functional programs (:data:`.functional.UNARY`, :data:`.functional.BINARY` over two
  values of one shape), which DTensor runs on each rank's piece;
* ``sum`` over a dim with ``keepdim``: over a sharded dim DTensor leaves a ``Partial`` result, reduced later;
* ``redistribute`` to a drawn placement: the collectives DTensor chooses (all-gather, all-reduce of a
  ``Partial``, reduce-scatter, local chunking), traced by Dynamo into functional collectives.

Every rank runs the program eagerly, then compiled with the drawn backend (``aot_eager`` or ``inductor``), and
compares every value's ``full_tensor()`` (gathered eagerly, outside the compiled function) and placements.

The bound, per element, is the functional programs' (:mod:`.functional`, with where torch documents it): each
pointwise op may round by :data:`.functional.ULPS` units in the last place of its result, and an input's
error propagates by the op's Lipschitz bound.  A ``sum`` of n elements adds up its inputs' errors and may be
re-associated, compiled, in any order: at most n - 1 roundings, each within ``ULPS`` ulps of the sum of the
magnitudes; and the all-reduce that later resolves a ``Partial`` adds at most ``world`` roundings more, so
``(n + world) * ULPS * eps * sum(|x|)`` is added.  A redistribute moves values and errors, and adds nothing
beyond that.  The bounds are computed alongside, in float64, on the full tensors (no DTensor, no
communication), so each compared element has its own.

Placements are compared too: DTensor's sharding propagation is the same code compiled or not, so a compiled
value placed differently from the eager one is a deviation.

Graph breaks are events, not failures.  Recompilation is bounded by :mod:`.cache`: a program is compiled once
per (steps, shape, dtype, placement, backend) on a code object of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import currently_in_test_context, event
from hypothesis import strategies as st

from fuzzdist.known_bugs import known_failures
from fuzzdist.pool.rank.isolation import keep_process_groups
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.compile import cache
from fuzzdist.properties.compile.functional import BACKENDS, BINARY, ULPS, UNARY, compare, compute_bound, compute_op
from fuzzdist.properties.compile.outcomes import fail_on_rank_problems, report_graph_breaks
from fuzzdist.strategies import mix_seed, seeds

try:
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import DTensor, Placement, Replicate, Shard, distribute_tensor
except ImportError as exc:  # pragma: no cover - torch without public DTensor
    raise ImportError(f"torch {torch.__version__} has no torch.distributed.tensor") from exc

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

PLACEMENTS = ("S0", "S1", "R")
"""The placements drawn for the input and for a redistribute: ``Shard(0)``, ``Shard(1)``, ``Replicate()``."""
DTYPES = (torch.float32, torch.float64)
MAX_DIM = 4
MAX_STEPS = 4
SEEDS = seeds()


@dataclass(frozen=True)
class DStep:
    """One step: ``kind`` "compute" (``op`` of UNARY/BINARY over values ``args``), "sum" (over dim ``dim`` of
    value ``args[0]``, keepdim) or "redistribute" (value ``args[0]`` to ``placement``)."""

    kind: str
    op: str
    args: tuple[int, ...]
    dim: int = 0
    placement: str = "R"


@dataclass(frozen=True)
class DTensorProgram:
    """``steps`` over one DTensor of ``shape`` and ``dtype`` placed ``placement``; value 0 is the input."""

    shape: tuple[int, int]
    dtype: torch.dtype
    placement: str
    steps: tuple[DStep, ...]


@dataclass(frozen=True)
class DTensorCase:
    """A program, compiled with ``backend`` (a name, or a backend function), on an input built from ``seed``."""

    program: DTensorProgram
    backend: Any = "aot_eager"
    seed: int = 0


@dataclass(frozen=True)
class DTensorOutcome:
    """What a rank saw: its problems, and the graph breaks compiling met."""

    problems: tuple[Problem, ...]
    breaks: tuple[str, ...]
    cached: bool


# ---------------------------------------------------------------------------
# on the ranks


def placement_of(name: str) -> Placement:
    """The DTensor placement a drawn name stands for."""
    return Replicate() if name == "R" else Shard(int(name[1]))


def run_dtensor_program(steps: tuple[DStep, ...], x: DTensor) -> list[DTensor]:
    """The program: every value it makes, in order (the input left out).  Compiled as it is."""
    values: list[Any] = [x]  # DTensors, which torch's operators type as Tensor
    for step in steps:
        a = values[step.args[0]]
        if step.kind == "compute":
            values.append(compute_op(step.op, [values[i] for i in step.args]))
        elif step.kind == "sum":
            values.append(a.sum(dim=step.dim, keepdim=True))
        else:
            values.append(a.redistribute(a.device_mesh, [placement_of(step.placement)]))
    return values[1:]


def full_with_bounds(
    steps: tuple[DStep, ...], full: torch.Tensor, world: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The program on the full tensors (no DTensor, no communication), and each value's error bound alongside
    (float64, per element): what a compiled run may differ by (see the module's docstring)."""
    ulp = ULPS * torch.finfo(full.dtype).eps
    values, bounds = [full], [torch.zeros(full.shape, dtype=torch.float64)]
    for step in steps:
        a, b = values[step.args[0]], bounds[step.args[0]]
        if step.kind == "compute":
            xs = [values[i] for i in step.args]
            out = compute_op(step.op, xs)
            bounds.append(compute_bound(step.op, xs, [bounds[i] for i in step.args], out, ulp))
        elif step.kind == "sum":
            out = a.sum(dim=step.dim, keepdim=True)
            roundings = a.shape[step.dim] + world
            magnitude = a.double().abs().sum(dim=step.dim, keepdim=True)
            bounds.append(b.sum(dim=step.dim, keepdim=True) + roundings * ulp * magnitude)
        else:
            out = a
            bounds.append(b)
        values.append(out)
    return values[1:], bounds[1:]


_MESHES: dict[tuple[str, int], DeviceMesh] = {}


def mesh_of(device_type: str, world: int) -> DeviceMesh:
    """The 1-D mesh of every rank, built once per rank process."""
    key = (device_type, world)
    if key not in _MESHES:
        with keep_process_groups():  # cached for the process's life: not destroyed after the example
            _MESHES[key] = init_device_mesh(device_type, (world,))
    return _MESHES[key]


def full_input(program: DTensorProgram, seed: int) -> torch.Tensor:
    """The program's input as a whole tensor, the same on every rank: normal values."""
    gen = torch.Generator().manual_seed(mix_seed(seed, 0x64746E) % 2**63)
    return torch.randn(program.shape, generator=gen, dtype=torch.float64).to(program.dtype)


def dtensor_compiled_and_check(ctx: RankContext, case: DTensorCase) -> DTensorOutcome:
    """On every rank: run the program eagerly, then compiled (built once per structure: :mod:`.cache`), and
    compare every value's full tensor (within its bound) and placements."""
    from torch._dynamo.utils import counters

    program = case.program
    mesh = mesh_of(ctx.device.type, ctx.world_size)
    full = full_input(program, case.seed)
    x = distribute_tensor(full, mesh, [placement_of(program.placement)])
    eager = run_dtensor_program(program.steps, x)
    _, bounds = full_with_bounds(program.steps, full, ctx.world_size)
    key = ("dtensor", program, case.backend)
    entry = cache.compiled(key, run_dtensor_program, case.backend, None)
    cached = entry.called
    breaks = dict(counters["graph_break"])
    compiled = cache.call(entry, program.steps, x)
    new_breaks = tuple(sorted(r for r, n in counters["graph_break"].items() if n > breaks.get(r, 0)))
    problems: list[Problem | None] = []
    for i, (got, expected, bound) in enumerate(zip(compiled, eager, bounds, strict=True)):
        what = f"value {i + 1}"
        if tuple(got.placements) != tuple(expected.placements):
            problems.append(
                Problem(Kind.MISMATCH, f"{what} placements", got=tuple(got.placements), expected=expected.placements)
            )
        problems.append(compare(what, got.full_tensor(), expected.full_tensor(), bound))
    return DTensorOutcome(tuple(p for p in problems if p is not None), new_breaks, cached)


# ---------------------------------------------------------------------------
# drawing programs


@st.composite
def dtensor_programs(draw: st.DrawFn) -> DTensorProgram:
    """A 2-D input (dims 1 to MAX_DIM), a dtype, a placement and 1 to MAX_STEPS steps over earlier values.
    Shrinks towards one ``neg`` of a (1, 1) float32 input placed ``Shard(0)``."""
    shape = (draw(st.integers(1, MAX_DIM)), draw(st.integers(1, MAX_DIM)))
    dtype = draw(st.sampled_from(DTYPES))
    placement = draw(st.sampled_from(PLACEMENTS))
    shapes = [shape]
    steps: list[DStep] = []
    # one step, then a drawn "one more?" after each (as st.lists draws): the shrinker deletes a step with its
    # flag, where a drawn count would have to change in step with the deletion
    while not steps or (len(steps) < MAX_STEPS and draw(st.booleans())):
        kind = draw(st.sampled_from(("compute", "sum", "redistribute")))
        a = draw(st.integers(0, len(shapes) - 1))
        if kind == "compute":
            op = draw(st.sampled_from(UNARY + BINARY))
            args: tuple[int, ...] = (a,)
            if op in BINARY:
                args = (a, draw(st.sampled_from([i for i, s in enumerate(shapes) if s == shapes[a]])))
            steps.append(DStep("compute", op, args))
            shapes.append(shapes[a])
        elif kind == "sum":
            dim = draw(st.integers(0, 1))
            steps.append(DStep("sum", "sum", (a,), dim=dim))
            shapes.append((1, shapes[a][1]) if dim == 0 else (shapes[a][0], 1))
        else:
            steps.append(DStep("redistribute", "redistribute", (a,), placement=draw(st.sampled_from(PLACEMENTS))))
            shapes.append(shapes[a])
    return DTensorProgram(shape, dtype, placement, tuple(steps))


@st.composite
def dtensor_cases(draw: st.DrawFn, backends: tuple[Any, ...] = BACKENDS) -> DTensorCase:
    """A program, a backend of ``backends``, a seed."""
    return DTensorCase(draw(dtensor_programs()), draw(st.sampled_from(tuple(backends))), draw(SEEDS))


# ---------------------------------------------------------------------------
# the driver-side check


def check(pool: Pool, case: DTensorCase) -> None:
    """Run ``case`` on ``pool``: raise :class:`PropertyFailure` if any rank's compiled values differ from its
    eager ones beyond the bound, or are placed differently."""
    with known_failures("compile", case=case):
        outcomes: list[DTensorOutcome] = pool.run(dtensor_compiled_and_check, case)
        if currently_in_test_context():
            event("compile dtensor: cached graph" if outcomes[0].cached else "compile dtensor: new graph")
        report_graph_breaks(outcomes, "compile dtensor")
        fail_on_rank_problems(outcomes, "compiled DTensor program differs from eager")
