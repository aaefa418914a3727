"""Pipelining: a model split into ``PipelineStage``s and run by a schedule gives the unsplit model's loss,
output and gradients.

For any setup ``pipeline_configs`` draws (an MLP of ``nn.Linear`` layers with ``tanh`` between them,
split at drawn layer boundaries into one stage per rank, or two per rank for a schedule with several
stages per rank, stage ``s`` on rank ``s % W``; ``n_microbatches`` micro-batches of equal size; a loss
function and ``scale_grads``), built by hand with ``PipelineStage`` (static or dynamic shape
inference) on CPU ranks over gloo, one ``schedule.step(...)``:

* on the rank holding the last stage, the returned output equals the unsplit model's output on the
  whole batch, and ``losses`` holds, for each micro-batch in order, ``loss_fn`` of that micro-batch's
  output and target;
* on every rank, every parameter of every local stage has the gradient the docs promise: "Gradients
  are scaled by num_microbatches depending on the scale_grads argument ... This setting should match
  the configuration of your loss_fn, which may either average losses (scale_grads=True) or sum
  losses (scale_grads=False)", i.e. ``(1/n if scale_grads else 1) * sum_mb grad(loss_fn(out_mb, y_mb))``.

The reference is the unsplit model, built from the same seed on every rank, run on each micro-batch
(``torch.tensor_split`` of the batch along dim 0, the default ``TensorChunkSpec(0)``) with no
communication.

What is drawn, and where the docs constrain it:

* The batch is ``n_microbatches * microbatch_size``: the docs' examples split the batch into equal
  micro-batches, and ``step`` documents only that it "will chunk the input into microbatches".
* ``Schedule1F1B``: ``n_microbatches >= num_stages``; its docstring is silent, its constructor refuses
  fewer with "Number of microbatches (n) must be greater than or equal to the number of stages (S)".
  ``ScheduleInterleaved1F1B``: ``n_microbatches % max(1, n_microbatches // W) == 0``, as its docstring
  states ("num_rounds = max(1, n_microbatches // pp_group_size) and it works as long as
  n_microbatches % num_rounds is 0").  ``ScheduleGPipe`` and ``ScheduleLoopedBFS``: any count.
* Loss functions: ``mse`` (mean, with ``scale_grads`` True or False: the reading checked is the
  formula above whichever the loss is) and ``sse`` (the sum of squared errors).
* Static stages get ``input_args`` and ``output_args``, "Example input tensors" and "Example output
  tensors" (``PipelineStage``'s docstring) of one micro-batch: by default the tensors a stage sees
  at run time in training, zeros of the activation's shape and dtype that require grad (all but
  stage 0's input, the batch itself).  With ``pipeline_configs(..., plain_examples=True)`` they may
  also be plain zeros that don't require grad, like the docs' ``example_input_microbatch`` ("The
  ``PipelineStage`` requires an example argument ``input_args`` representing the runtime input to
  the stage ... to determine the input and output shapes required for communication"): then torch
  2.13 sends no gradients between the stages, and each stage but the last runs backward without
  an output gradient (an implicit gradient of ones where its output has one element, else a
  RuntimeError), the known bug ``pipelining-static-args-no-grad``; where the gradients equal what
  that computes (:func:`implicit_ones_gradients`) a problem says so
  (:attr:`~fuzzdist.problems.Symptom.IMPLICIT_ONES`).  Opt-in, like
  every property's drawing of a known bug's inputs that a user can avoid: every such example fails.
* Not drawn: the tracer frontend ``pipeline()`` (stages here are built by hand), zero-bubble and
  DualPipeV schedules (they split backward into input and weight passes; not this property's
  contract), more than one ``step`` (gradients then accumulate, autograd's contract, not pipelining's),
  micro-batches of unequal size.

Tolerance.  Each micro-batch's forward and backward run the same operations on the same tensors as
the reference's (activations are sent unchanged), so each micro-batch's gradient ``g_mb`` is the
reference's up to its own rounding; the schedule then adds the n of them into ``.grad`` and divides
by n: at most n + 1 roundings, plus a few for kernels that group sums differently, each within
``eps(dtype)`` of the terms.  So every element must lie within
``(n + 3) * eps * scale * sum_mb |g_mb| + (n + 3) * tiny(dtype)`` of ``scale * sum_mb g_mb`` computed
in float64, a bound on rounding alone that no lost, doubled or misplaced micro-batch fits into.
Outputs and losses: within ``4 * eps * |value| + tiny``.

Generalises torch's pipelining schedule tests (``test_schedule_multiproc.py``: fixed MLPs, fixed
micro-batch counts, GPU ranks) to drawn depths, widths, split points, micro-batch counts and sizes,
losses and shape inference on CPU.  The implementation under test is ``check(...,
schedule_class=...)``: any schedule class taking ``(stage or stages, n_microbatches, loss_fn=...,
scale_grads=...)``; a ``PipelineScheduleMulti`` subclass gets two stages per rank.

Modules: ``known_bugs.py``, the torch bugs this family meets (listed in :mod:`fuzzdist.known_bugs.entries`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st
from torch import nn

from fuzzdist.errors import InvalidArgument, InvalidStrategyArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem, Symptom, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties._arguments import check_model_dtype_and_seed
from fuzzdist.strategies import check_ints, seeds
from fuzzdist.toolkit.checks import mismatch
from fuzzdist.toolkit.reporting import capped

try:
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
        ScheduleLoopedBFS,
    )
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, PipelineScheduleSingle
except ImportError as exc:  # pragma: no cover - torch < 2.4
    raise ImportError(f"torch {torch.__version__} has no torch.distributed.pipelining") from exc
# The property checks the documented scale_grads contract, which older schedules (torch 2.6) lack.
if "scale_grads" not in __import__("inspect").signature(PipelineScheduleSingle.__init__).parameters:
    raise ImportError(
        f"torch {torch.__version__}'s pipeline schedules take no scale_grads (the contract "
        "this property checks); use torch 2.7 or newer"
    )

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

SEEDS = seeds()
DTYPES = st.sampled_from([torch.float32, torch.float64])
LOSSES = ("mse", "sse")
SCHEDULES: tuple[type, ...] = (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleLoopedBFS)


def stages_per_rank(schedule_class: type) -> int:
    """Two stages per rank for a schedule with several stages per rank, else one."""
    return 2 if issubclass(schedule_class, PipelineScheduleMulti) else 1


def microbatch_counts_allowed(schedule_class: type, n: int, num_stages: int, world_size: int) -> bool:
    """Whether ``schedule_class`` accepts ``n`` micro-batches (the module docstring says where each rule is
    stated)."""
    if issubclass(schedule_class, Schedule1F1B):
        return n >= num_stages
    if issubclass(schedule_class, ScheduleInterleaved1F1B):
        return n % max(1, n // world_size) == 0
    return n >= 1


@dataclass(frozen=True)
class PipeConfig:
    """One example: an MLP ``widths[0] -> ... -> widths[-1]`` (``tanh`` between layers), split so that stage
    ``s`` holds layers ``bounds[s]:bounds[s + 1]`` and sits on rank ``s % world_size``; ``n_microbatches``
    micro-batches of ``microbatch_size`` rows; ``loss`` ("mse" or "sse"), ``scale_grads``, and whether the
    stages get their shapes up front (``static``), from example tensors that require grad as the
    activations do in training or, with ``plain_examples``, plain ones (see the module docstring)."""

    world_size: int
    widths: tuple[int, ...]
    bounds: tuple[int, ...]
    n_microbatches: int = 1
    microbatch_size: int = 1
    loss: str = "mse"
    scale_grads: bool = True
    static: bool = False
    plain_examples: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or self.world_size < 1:
            raise InvalidArgument(f"world_size must be an int >= 1, got {self.world_size!r}")
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        object.__setattr__(self, "bounds", tuple(int(b) for b in self.bounds))
        layers = len(self.widths) - 1
        if layers < 1 or min(self.widths) < 1:
            raise InvalidArgument("widths needs >= 2 entries, all >= 1")
        b = self.bounds
        if len(b) < 2 or b[0] != 0 or b[-1] != layers or any(x >= y for x, y in zip(b, b[1:], strict=False)):
            raise InvalidArgument(
                f"bounds must rise strictly from 0 to {layers} (one layer or more per stage), got {b}"
            )
        if (len(b) - 1) % self.world_size:
            raise InvalidArgument(f"{len(b) - 1} stages don't place evenly on {self.world_size} ranks")
        if self.loss not in LOSSES:
            raise InvalidArgument(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.n_microbatches < 1 or self.microbatch_size < 1:
            raise InvalidArgument("n_microbatches and microbatch_size must be >= 1")
        if self.plain_examples and not self.static:
            raise InvalidArgument("plain_examples describes static stages' example tensors: set static=True too")

    @property
    def num_stages(self) -> int:
        """How many stages the model is split into."""
        return len(self.bounds) - 1

    @property
    def batch(self) -> int:
        """The whole batch: ``n_microbatches * microbatch_size`` rows."""
        return self.n_microbatches * self.microbatch_size

    def build_model(self, seed: int, dtype: torch.dtype) -> nn.Sequential:
        """The unsplit model, identical on every rank for the same seed; the global RNG is left alone."""
        gen = _generator(seed, 1)
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(self.widths, self.widths[1:], strict=False)):
            linear = nn.Linear(a, b, dtype=dtype)
            with torch.no_grad():
                for p in linear.parameters():
                    p.copy_((torch.rand(p.shape, generator=gen, dtype=dtype) * 2 - 1) / math.sqrt(a))
            layers.append(linear)
            if i < len(self.widths) - 2:
                layers.append(nn.Tanh())
        return nn.Sequential(*layers)

    def stage_module(self, model: nn.Sequential, stage: int) -> nn.Sequential:
        """Stage ``stage``'s part of ``model`` (sharing its parameters): its Linear layers, each followed by
        the tanh the model has after it."""
        modules = list(model)
        lo, hi = self.bounds[stage], self.bounds[stage + 1]
        return nn.Sequential(*modules[2 * lo : min(2 * hi, len(modules))])

    def batch_data(self, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of the whole batch, identical on every rank."""
        gen = _generator(seed, 2)
        x = torch.rand((self.batch, self.widths[0]), generator=gen, dtype=dtype) * 2 - 1
        y = torch.rand((self.batch, self.widths[-1]), generator=gen, dtype=dtype) * 2 - 1
        return x, y


def _generator(seed: int, *salt: int) -> torch.Generator:
    text = ",".join(str(int(p)) for p in (seed, *salt)).encode()
    gen = torch.Generator()
    gen.manual_seed(int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little"))
    return gen


def loss_function(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss function a name stands for: ``mse`` (mean squared error) or ``sse`` (sum of squared errors)."""
    if name == "mse":
        return _mse
    if name == "sse":
        return _sse
    raise InvalidArgument(f"loss must be one of {LOSSES}, got {name!r}")


def _mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)


def _sse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((output - target) ** 2).sum()


# ---------------------------------------------------------------------------
# the reference


class _GradientSums:
    """Each parameter's gradient summed over micro-batches in float64, with the sum of its magnitudes
    (what the rounding bound grows with)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.magnitudes: dict[str, torch.Tensor] = {}

    def add(self, model: nn.Module) -> None:
        """Add the gradients ``model``'s parameters hold now (None counts as zeros)."""
        for name, p in model.named_parameters():
            g = torch.zeros_like(p, dtype=torch.float64) if p.grad is None else p.grad.double()
            self.sums[name] = self.sums[name] + g if name in self.sums else g
            self.magnitudes[name] = self.magnitudes[name] + g.abs() if name in self.magnitudes else g.abs()

    def bounded(self, dtype: torch.dtype, n: int, scale: float) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Per parameter, ``scale * sum`` and its rounding bound for ``n`` micro-batches in ``dtype``."""
        info = torch.finfo(dtype)
        roundings = n + 3
        return {
            name: (total * scale, roundings * info.eps * self.magnitudes[name] * scale + roundings * info.tiny)
            for name, total in self.sums.items()
        }


def reference(config: PipeConfig, seed: int, dtype: torch.dtype) -> dict[str, Any]:
    """Run the unsplit model on each micro-batch, locally: the output, each micro-batch's loss, and each
    parameter's expected gradient with its rounding bound (see the module docstring)."""
    model = config.build_model(seed, dtype)
    x, y = config.batch_data(seed, dtype)
    loss_fn = loss_function(config.loss)
    n = config.n_microbatches
    scale = 1.0 / n if config.scale_grads else 1.0
    outputs, losses = [], []
    sums = _GradientSums()
    for xb, yb in zip(torch.tensor_split(x, n), torch.tensor_split(y, n), strict=True):
        model.zero_grad(set_to_none=True)
        out = model(xb)
        loss = loss_fn(out, yb)
        loss.backward()
        outputs.append(out.detach())
        losses.append(loss.detach())
        sums.add(model)
    return {"output": torch.cat(outputs), "losses": losses, "grads": sums.bounded(dtype, n, scale)}


def implicit_ones_gradients(
    config: PipeConfig,
    seed: int,
    dtype: torch.dtype,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """What torch 2.13 gives stage parameters from plain static example tensors (the known bug): each
    stage but the last backpropagates a gradient of ones from its own output, with no gradient from
    the next stage; the last stage its loss's.  Per parameter, ``scale * sum_mb`` in float64 and its
    rounding bound, as :func:`reference` gives them."""
    model = config.build_model(seed, dtype)
    x, y = config.batch_data(seed, dtype)
    loss_fn = loss_function(config.loss)
    n = config.n_microbatches
    scale = 1.0 / n if config.scale_grads else 1.0
    sums = _GradientSums()
    stages = [config.stage_module(model, s) for s in range(config.num_stages)]
    for xb, yb in zip(torch.tensor_split(x, n), torch.tensor_split(y, n), strict=True):
        model.zero_grad(set_to_none=True)
        h = xb
        for s, stage in enumerate(stages):
            out = stage(h.detach())
            (loss_fn(out, yb) if s == config.num_stages - 1 else out.sum()).backward()
            h = out
        sums.add(model)
    return sums.bounded(dtype, n, scale)


def _within(what: str, actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor) -> Problem | None:
    """None if ``actual`` is within ``bound`` of ``expected`` element by element, else the worst difference."""
    if tuple(actual.shape) != tuple(expected.shape):
        return Problem(Kind.SHAPE, what, got=tuple(actual.shape), expected=tuple(expected.shape))
    error = (actual.double() - expected.double()).abs()
    return mismatch(what, actual, expected, ~(error <= bound), bound, error)  # NaN counts as bad


def _value_bound(expected: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    info = torch.finfo(dtype)
    return 4 * info.eps * expected.double().abs() + 4 * info.tiny


# ---------------------------------------------------------------------------
# on the ranks


def pipeline_parity(
    ctx: RankContext, config: PipeConfig, dtype: torch.dtype, seed: int, schedule_class: type = ScheduleGPipe
) -> list[Problem]:
    """On every rank: build this rank's stages by hand, run one ``schedule_class`` step and compare with the
    local reference; return the problems (empty if none)."""
    world, rank = ctx.world_size, ctx.rank
    if config.world_size != world:
        raise InvalidArgument(
            f"the config is for {config.world_size} ranks; this pool has {world}: "
            f"draw it with pipeline_configs({world}, ...)"
        )
    per_rank = stages_per_rank(schedule_class)
    if config.num_stages != per_rank * world:
        raise InvalidArgument(
            f"{schedule_class.__name__} runs {per_rank} stage(s) per rank: {per_rank * world} "
            f"stages on {world} ranks, the config has {config.num_stages}; draw it with "
            f"pipeline_configs({world}, {schedule_class.__name__})"
        )
    model = config.build_model(seed, dtype)
    expected = reference(config, seed, dtype)
    mine = list(range(rank, config.num_stages, world))
    stages = []
    modules = {}
    for s in mine:
        module = config.stage_module(model, s)
        modules[s] = module
        kwargs: dict[str, Any] = {}
        if config.static:
            mb = config.microbatch_size
            example_in = torch.zeros((mb, config.widths[config.bounds[s]]), dtype=dtype)
            example_out = torch.zeros((mb, config.widths[config.bounds[s + 1]]), dtype=dtype)
            if not config.plain_examples:  # as in training: activations require grad, the batch does not
                example_in.requires_grad_(s > 0)
                example_out.requires_grad_(True)
            kwargs = {"input_args": example_in, "output_args": example_out}
        stages.append(PipelineStage(module, s, config.num_stages, ctx.device, group=ctx.group, **kwargs))
    schedule = schedule_class(
        stages if per_rank > 1 else stages[0],
        config.n_microbatches,
        loss_fn=loss_function(config.loss),
        scale_grads=config.scale_grads,
    )
    x, y = config.batch_data(seed, dtype)
    holds_first, holds_last = 0 in mine, config.num_stages - 1 in mine
    args = (x,) if holds_first else ()
    kwargs = {"target": y, "losses": []} if holds_last else {}
    out = schedule.step(*args, **kwargs)
    problems: list[Problem] = []
    if holds_last:
        if not isinstance(out, torch.Tensor):
            problems.append(
                Problem(Kind.MISSING, "step() on the last stage's rank", got=type(out).__name__, expected="the output")
            )
        else:
            problem = _within("output", out.detach(), expected["output"], _value_bound(expected["output"], dtype))
            if problem:
                problems.append(problem)
        losses = kwargs["losses"]
        if len(losses) != config.n_microbatches:
            problems.append(
                Problem(
                    Kind.MISSING,
                    "losses",
                    got=len(losses),
                    expected=config.n_microbatches,
                    detail="(one per micro-batch)",
                )
            )
        else:
            for i, (got, want) in enumerate(zip(losses, expected["losses"], strict=True)):
                got_t = torch.as_tensor(got).detach()
                problem = _within(f"loss of micro-batch {i}", got_t.reshape(()), want, _value_bound(want, dtype))
                if problem:
                    problems.append(problem)
    names = dict(model.named_parameters())
    alternative = implicit_ones_gradients(config, seed, dtype) if config.plain_examples else None
    for s in mine:
        for p in modules[s].parameters():
            name = next(n for n, q in names.items() if q is p)
            want, bound = expected["grads"][name]
            if p.grad is None:
                problems.append(Problem(Kind.MISSING, f"stage {s}: grad {name}", got=None))
                continue
            problem = _within(f"stage {s}: grad {name}", p.grad.detach(), want, bound)
            if problem and alternative is not None and _within("", p.grad.detach(), *alternative[name]) is None:
                problem = problem.with_symptom(Symptom.IMPLICIT_ONES)  # exactly what the known bug computes
            if problem:
                problems.append(problem)
    return capped(problems)


# ---------------------------------------------------------------------------
# strategies


@st.composite
def pipeline_configs(
    draw: st.DrawFn,
    world_size: int,
    schedule_class: type = ScheduleGPipe,
    *,
    max_extra_layers: int = 2,
    max_width: int = 6,
    max_microbatches: int = 4,
    max_microbatch_size: int = 3,
    plain_examples: bool = False,
) -> PipeConfig:
    """A :class:`PipeConfig` for ``world_size`` ranks and ``schedule_class`` (one stage per rank, two for a
    ``PipelineScheduleMulti``).

    Covers one to ``1 + max_extra_layers`` Linear layers per stage (split points drawn), widths 1 to
    ``max_width``, 1 to ``max_microbatches`` micro-batches the schedule accepts (see
    :func:`microbatch_counts_allowed`) of 1 to ``max_microbatch_size`` rows, the ``mse`` and ``sse``
    losses, ``scale_grads`` True or False, and static or dynamic stage shapes; static stages get
    example tensors that require grad as the activations do in training, and, with
    ``plain_examples``, sometimes plain ones (the known bug ``pipelining-static-args-no-grad``).

    Shrinks towards one 1 -> 1 layer per stage, the fewest micro-batches the schedule accepts, one row
    each, ``mse``, ``scale_grads=True``, dynamic shapes.
    """
    check_ints(
        ("world_size", world_size, 1),
        ("max_extra_layers", max_extra_layers, 0),
        ("max_width", max_width, 1),
        ("max_microbatches", max_microbatches, 1),
        ("max_microbatch_size", max_microbatch_size, 1),
    )
    _check_schedule_class(schedule_class, InvalidStrategyArgument)
    num_stages = stages_per_rank(schedule_class) * world_size
    layers = num_stages + draw(st.integers(0, max_extra_layers), label="extra_layers")
    widths = tuple(draw(st.integers(1, max_width)) for _ in range(layers + 1))
    cuts = draw(
        st.sets(st.integers(1, layers - 1), min_size=num_stages - 1, max_size=num_stages - 1)
        if layers > num_stages
        else st.just(set(range(1, layers)))
    )
    bounds = (0, *sorted(cuts), layers)
    counts = [
        n
        for n in range(1, max(max_microbatches, num_stages) + 1)
        if microbatch_counts_allowed(schedule_class, n, num_stages, world_size)
    ]
    n = draw(st.sampled_from(counts), label="n_microbatches")
    size = draw(st.integers(1, max_microbatch_size), label="microbatch_size")
    loss = draw(st.sampled_from(LOSSES), label="loss")
    scale = draw(st.booleans().map(lambda b: not b), label="scale_grads")
    static = draw(st.booleans(), label="static")
    plain = static and plain_examples and draw(st.booleans(), label="plain_examples")
    return PipeConfig(world_size, widths, bounds, n, size, loss, scale, static, plain)


# ---------------------------------------------------------------------------
# the driver-side check


def _check_schedule_class(schedule_class: Any, error: type[Exception]) -> None:
    if not isinstance(schedule_class, type) or not issubclass(
        schedule_class, (PipelineScheduleSingle, PipelineScheduleMulti)
    ):
        raise error(
            f"schedule_class must be a pipelining schedule class (a subclass of PipelineScheduleSingle "
            f"or PipelineScheduleMulti, e.g. one of {[c.__name__ for c in SCHEDULES]}), "
            f"got {schedule_class!r}"
        )


def check(
    pool: Pool, config: PipeConfig, dtype: torch.dtype, seed: int, *, schedule_class: type = ScheduleGPipe
) -> None:
    """Run one ``schedule_class`` step of ``config``'s pipeline on ``pool`` next to the local reference;
    raise :class:`PropertyFailure` if a loss, the output or a gradient differs.  ``schedule_class`` must be
    importable on the ranks (a top-level class).  Arguments that can't describe a run raise
    :class:`~fuzzdist.errors.InvalidArgument` before any rank runs."""
    if not isinstance(config, PipeConfig):
        raise InvalidArgument(
            f"config must be a PipeConfig (draw one with pipeline_configs), got {type(config).__name__}"
        )
    check_model_dtype_and_seed(dtype, seed)
    _check_schedule_class(schedule_class, InvalidArgument)
    if config.world_size != pool.world_size:
        raise InvalidArgument(
            f"the config is for {config.world_size} ranks; this pool has {pool.world_size}: "
            f"draw it with pipeline_configs({pool.world_size}, {schedule_class.__name__})"
        )
    per_rank = stages_per_rank(schedule_class)
    if config.num_stages != per_rank * pool.world_size:
        raise InvalidArgument(
            f"{schedule_class.__name__} runs {per_rank} stage(s) per rank: "
            f"{per_rank * pool.world_size} stages on {pool.world_size} ranks, the config has "
            f"{config.num_stages}; draw it with pipeline_configs({pool.world_size}, "
            f"{schedule_class.__name__})"
        )
    if not microbatch_counts_allowed(schedule_class, config.n_microbatches, config.num_stages, pool.world_size):
        raise InvalidArgument(
            f"{schedule_class.__name__} does not take {config.n_microbatches} micro-batches for "
            f"{config.num_stages} stages on {pool.world_size} ranks (see microbatch_counts_allowed)"
        )
    with known_failures("pipelining", config=config, dtype=dtype, seed=seed):
        results = pool.run(pipeline_parity, config, dtype, seed, schedule_class=schedule_class)
        wrong = {rank: problems for rank, problems in enumerate(results) if problems}
        if wrong:
            raise PropertyFailure(
                f"the pipeline differs from the unsplit model on ranks {sorted(wrong)}:{by_rank(wrong)}", results
            )
