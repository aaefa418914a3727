"""Uneven inputs: DDP (alone, or with ``ZeroRedundancyOptimizer``) under ``Join`` trains as documented.

Each rank has its own number of batches (0 included) and trains in a loop inside the join context
manager: ``DistributedDataParallel.join(divide_by_initial_world_size=..., throw_on_early_termination=...)``
for DDP alone, and, for DDP with ZeRO, the pattern of ``Join``'s own docstring, ``with Join([model,
optim]): for input in inputs: model(input)...backward(); optim.step()``, here with
``optim.zero_grad()`` after each step (the docstring's loop has none: its gradients would
accumulate across steps, which a training loop does not want).

The reference the documentation implies, computed on every rank with no communication:

* at step i, only the ranks that still have a batch (the active set A_i) contribute a gradient:
  a joined rank "shadows" the forward and backward passes (``DistributedDataParallel.join``), its
  shadowing all-reduce contributes zeros ("Joined processes contribute zero gradient", DDP's
  ``_match_all_reduce_for_bwd_pass``);
* the sum is divided by the initial world size W when ``divide_by_initial_world_size=True``, else by
  "the effective world size (number of ranks that have not depleted their inputs yet)", |A_i|.  So
  every active rank's gradient at step i is ``sum_{r in A_i} grad_r / D_i``, each rank's local
  gradient taken on the reference model at step i;
* the optimizer steps with that gradient, on the active ranks; with ZeRO, each rank updates its
  shard and broadcasts it, a joined rank through ZeRO's join hook ("shadowing the collective
  communications in the optimizer step"), so after step i every active rank holds the reference
  model after i + 1 steps;
* on leaving the context, "the context manager will broadcast the model corresponding to the last
  joined process to all processes": every rank ends with the model trained for max_r(n_r) steps,
  bitwise equal on every rank;
* with ``throw_on_early_termination=True``, "all trainers will throw an error once one rank runs out
  of inputs" (``Join.__exit__``: "Raises RuntimeError If throw_on_early_termination=True"): with
  m = min_r(n_r) < max_r(n_r), every rank raises a ``RuntimeError`` and no rank completes a step
  after the first m; the parameters are then the reference's after m steps, on every rank.  With
  even inputs nothing is raised.  The rank function catches the exception and reports it, so the
  pool's group stays usable: every collective the ranks issued was matched (the exhausted ranks'
  two all-reduces in ``__exit__`` match the active ranks' two in the next forward).

What is checked, on every rank, each step from the parameters the rank started it with (the
previous step's, once checked; the model as built at step 0), so that no rounding difference of an
earlier step carries over:

* the gradients after backward, against the exact (float64) ``sum_{r in A_i} grad_r / D_i`` of the
  active ranks' local gradients at those parameters, within the rounding bound of DDP's
  divide-then-all-reduce, ``(|A_i| + 1) * eps * sum_{r in A_i} |grad_r| / D_i`` (plus the dtype's
  tiniest spacing): a bound on rounding alone, which no lost, doubled or wrongly divided
  contribution fits into;
* the parameters after ``step()``, against one step of a local optimizer of the same class (its
  state following its own steps) from those parameters with those (checked) gradients, within
  ``2 * eps * |expected| + smallest_normal``: the same elementwise arithmetic, so only a last bit
  or two may differ (far below any update; ``assert_close``'s atol of 1e-5 would hide lost
  updates of ``lr * g``).  For DDP alone this is the rank's own optimizer's arithmetic; with ZeRO it
  checks the sharded step and the broadcasts, the joined ranks' shards included;
* on the ranks with the most batches, the parameters after the context equal those after their
  last step (the model every rank ends with), and the driver checks that every rank's final
  parameters are bitwise equal and the active ranks' gradients at each step too;
* with ``throw_on_early_termination``, the raising (above).

ZeRO's join hook steps the joined rank's shard with whatever gradients that rank holds ("Gradients
must be properly set before this hook is called", ``ZeroRedundancyOptimizer.join_hook``), and DDP's
join hook discards the result of its shadowing all-reduce: in ``Join``'s documented pattern, a
joined rank's shard is stepped with its own stale gradients (None after ``zero_grad()``: not at
all) instead of the active ranks' mean.  The property checks the documented reference anyway; where
the parameters instead equal what that computes (``stale_shard_gradients``), the problem says
(:attr:`~fuzzdist.problems.Symptom.STALE_SHARD`) and the known bug ``join-zero-joined-shard-stale`` recognises it.

Drawn (``join_cases``): a chain of 1 to 3 Linear layers (widths 1 to 4, with bias), 0 to 3 batches
per rank of 1 or 2 samples, DDP alone or with ZeRO, both ``divide_by_initial_world_size`` settings,
``throw_on_early_termination``, the optimizer (SGD, SGD with momentum 0.9, Adam; lr 0.05),
``zero_grad(set_to_none=True/False)``.  Not drawn: ``enable=False`` (documented for even inputs
only), models with buffers, ``find_unused_parameters``, and collectives of the user's own in the
loop (documented as needing ``throw_on_early_termination``).

The implementations under test are keywords: ``check(pool, case, seed, ddp_class=MyDDP,
optimizer_class=MyZeRO)``.

Modules: ``known_bugs.py``, the torch bugs this family meets (listed in :mod:`fuzzdist.known_bugs.entries`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st
from torch import nn
from torch.distributed.algorithms import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem, Symptom
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties._arguments import check_model_dtype_and_seed
from fuzzdist.properties._results import fail_on_reported_problems
from fuzzdist.strategies import check_ints, mix_seed_fnv, seeds
from fuzzdist.toolkit.checks import digest, mismatch
from fuzzdist.toolkit.models import init_uniform_
from fuzzdist.toolkit.reporting import capped

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

SEEDS = seeds()
DTYPES = st.sampled_from([torch.float32, torch.float64])
PARAM_EPS = 2  # parameters: within 2 eps of the dtype, relative (see the module docstring)
OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
LR = 0.05
MAX_WIDTH = 4
MAX_LAYERS = 3


@dataclass(frozen=True)
class JoinCase:
    """One uneven-inputs training run, as plain picklable values.

    ``widths``: a chain of Linear layers (with bias, ReLU between them); ``counts[r]``: the number of
    batches rank r trains on, each of ``batch_size`` samples; ``zero``: ``Join([ddp, zero])`` with a
    ``ZeroRedundancyOptimizer`` (else ``ddp.join(...)`` and a plain optimizer on each rank);
    ``divide_by_initial_world_size``, ``throw_on_early_termination``: the join options;
    ``optimizer``: one of ``OPTIMIZERS``; ``set_to_none``: ``zero_grad``'s argument after each step.
    """

    widths: tuple[int, ...] = (1, 1)
    counts: tuple[int, ...] = (0, 0)
    batch_size: int = 1
    zero: bool = False
    divide_by_initial_world_size: bool = True
    throw_on_early_termination: bool = False
    optimizer: str = "sgd"
    set_to_none: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        object.__setattr__(self, "counts", tuple(int(c) for c in self.counts))
        if len(self.widths) < 2 or min(self.widths) < 1:
            raise InvalidArgument("widths needs >= 2 entries, all >= 1")
        if not self.counts or min(self.counts) < 0:
            raise InvalidArgument("counts needs one entry >= 0 per rank")
        if self.batch_size < 1:
            raise InvalidArgument("batch_size must be >= 1")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidArgument(f"unknown optimizer {self.optimizer!r}; choose from {OPTIMIZERS}")
        for name in ("zero", "divide_by_initial_world_size", "throw_on_early_termination", "set_to_none"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgument(f"{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def world_size(self) -> int:
        return len(self.counts)

    @property
    def throws(self) -> bool:
        """Whether the documented outcome is every rank raising: throw on, and uneven counts."""
        return self.throw_on_early_termination and min(self.counts) < max(self.counts)

    @property
    def steps(self) -> int:
        """Steps the model takes: max(counts), or min(counts) where every rank throws."""
        return min(self.counts) if self.throws else max(self.counts)

    def active(self, step: int) -> list[int]:
        """The ranks that still have a batch at ``step``."""
        return [r for r, n in enumerate(self.counts) if n > step]

    def divisor(self, step: int) -> int:
        """What DDP divides the summed gradient by at ``step``."""
        return self.world_size if self.divide_by_initial_world_size else len(self.active(step))

    def build_model(self, seed: int, dtype: torch.dtype) -> nn.Module:
        """The model, identical on every rank for the same seed; the global RNG is left alone."""
        gen = torch.Generator().manual_seed(mix_seed_fnv(seed, 0x6A6F696E))
        modules: list[nn.Module] = []
        for k, (a, b) in enumerate(zip(self.widths, self.widths[1:], strict=False)):
            if k:
                modules.append(nn.ReLU())
            modules.append(nn.Linear(a, b, dtype=dtype))
        return init_uniform_(nn.Sequential(*modules), gen)

    def make_batch(self, rank: int, step: int, seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Rank ``rank``'s (inputs, targets) at ``step``, deterministic in (seed, rank, step)."""
        gen = torch.Generator().manual_seed(mix_seed_fnv(seed, rank, step))
        x = torch.rand((self.batch_size, self.widths[0]), generator=gen, dtype=torch.float64) * 2 - 1
        y = torch.rand((self.batch_size, self.widths[-1]), generator=gen, dtype=torch.float64) * 2 - 1
        return x.to(dtype), y.to(dtype)

    def build_optimizer(self, params: Any) -> torch.optim.Optimizer:
        """The plain optimizer (DDP alone, and the reference)."""
        cls, kwargs = self.optimizer_args()
        return cls(params, **kwargs)

    def optimizer_args(self) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
        """The torch.optim class and its keyword arguments."""
        if self.optimizer == "adam":
            return torch.optim.Adam, {"lr": LR}
        return torch.optim.SGD, {"lr": LR, "momentum": 0.9 if self.optimizer == "sgd_momentum" else 0.0}

    def __repr__(self) -> str:
        defaults = JoinCase()
        parts = [f"widths={self.widths}", f"counts={self.counts}"]
        for name in (
            "batch_size",
            "zero",
            "divide_by_initial_world_size",
            "throw_on_early_termination",
            "optimizer",
            "set_to_none",
        ):
            if getattr(self, name) != getattr(defaults, name):
                parts.append(f"{name}={getattr(self, name)!r}")
        return f"JoinCase({', '.join(parts)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def join_cases(world_size: int = 2, *, max_batches: int = 3, zero: bool = True) -> st.SearchStrategy[JoinCase]:
    """Uneven-inputs runs for ``world_size`` ranks: a chain of 1 to 3 Linear layers of widths 1 to 4,
    0 to ``max_batches`` batches per rank (even or not, 0 included) of 1 or 2 samples, DDP alone or
    (when ``zero``) with ZeRO, both ``divide_by_initial_world_size`` settings,
    ``throw_on_early_termination``, SGD / SGD with momentum / Adam, ``zero_grad(set_to_none=...)``.

    Every field is drawn whatever the others, so that shrinking one shifts no other.  Shrinks
    towards ``JoinCase()``: one Linear(1, 1), no batches on any rank, DDP alone, the defaults.
    """
    check_ints(("world_size", world_size, 1), ("max_batches", max_batches, 0))

    @st.composite
    def draw(draw: st.DrawFn) -> JoinCase:
        first = draw(st.integers(1, MAX_WIDTH))
        rest = draw(st.lists(st.integers(1, MAX_WIDTH), min_size=1, max_size=MAX_LAYERS))
        counts = tuple(draw(st.integers(0, max_batches)) for _ in range(world_size))
        batch_size = draw(st.integers(1, 2))
        with_zero = draw(st.booleans()) and zero
        divide = not draw(st.booleans())
        throw = draw(st.booleans())
        optimizer = draw(st.sampled_from(OPTIMIZERS))
        set_to_none = not draw(st.booleans())
        return JoinCase(
            widths=(first, *rest),
            counts=counts,
            batch_size=batch_size,
            zero=with_zero,
            divide_by_initial_world_size=divide,
            throw_on_early_termination=throw,
            optimizer=optimizer,
            set_to_none=set_to_none,
        )

    return draw()


# ---------------------------------------------------------------------------
# the reference


def expected_gradients(
    model: nn.Module,
    case: JoinCase,
    step: int,
    seed: int,
    dtype: torch.dtype,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """At ``step``, from ``model``'s parameters, with no communication: per parameter, the exact
    (float64) ``sum_{r in A_i} grad_r / D_i`` over the active ranks' local gradients, and its rounding
    bound (see the module docstring)."""
    active, divisor = case.active(step), case.divisor(step)
    exact: dict[str, torch.Tensor] = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in model.named_parameters()}
    magnitude = {n: t.clone() for n, t in exact.items()}
    for r in active:
        model.zero_grad(set_to_none=True)
        x, y = case.make_batch(r, step, seed, dtype)
        nn.functional.mse_loss(model(x), y).backward()
        for name, p in model.named_parameters():
            if p.grad is not None:
                exact[name] += p.grad.double()
                magnitude[name] += p.grad.double().abs()
    model.zero_grad(set_to_none=True)
    info = torch.finfo(dtype)
    rounding = (len(active) + 1) * info.eps
    return {n: (exact[n] / divisor, rounding * magnitude[n] / divisor + info.eps * info.smallest_normal) for n in exact}


class LocalStepper:
    """A local model and its own optimizer (the case's), that take each step from given parameters
    with given gradients: the optimizer's state follows the steps it took."""

    def __init__(self, case: JoinCase, seed: int, dtype: torch.dtype) -> None:
        self.model = case.build_model(seed, dtype)
        self.optimizer = case.build_optimizer(self.model.parameters())

    def load(self, params: dict[str, torch.Tensor]) -> nn.Module:
        """The model, holding ``params``."""
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                p.copy_(params[name])
        return self.model

    def step(self, start: dict[str, torch.Tensor], grads: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
        """The parameters after one optimizer step from ``start`` with ``grads`` (None: no gradient)."""
        self.load(start)
        for name, p in self.model.named_parameters():
            grad = grads[name]
            p.grad = None if grad is None else grad.detach().clone()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {n: p.detach().clone() for n, p in self.model.named_parameters()}


def stale_shard_gradients(
    case: JoinCase, step: int, grads: dict[str, torch.Tensor | None], owners: dict[str, int]
) -> dict[str, torch.Tensor | None]:
    """The gradients ``Join([ddp, zero])`` steps with on torch 2.13 (the known bug): a parameter whose
    ZeRO owner has joined by ``step`` is stepped by that rank's join hook with the gradient that rank
    still holds, as DDP's join hook leaves it: None after ``zero_grad()`` (or if it never had a
    batch), zeros after ``zero_grad(set_to_none=False)``; the others with the active ranks' mean."""
    out: dict[str, torch.Tensor | None] = {}
    for name, grad in grads.items():
        owner = owners[name]
        if case.counts[owner] > step:
            out[name] = grad
        elif case.set_to_none or case.counts[owner] == 0 or grad is None:
            out[name] = None
        else:
            out[name] = torch.zeros_like(grad)
    return out


def param_problem(what: str, actual: torch.Tensor, expected: torch.Tensor) -> Problem | None:
    """None if ``actual`` is within ``2 * eps * |expected| + smallest_normal`` of ``expected``, else the
    first difference."""
    info = torch.finfo(actual.dtype)
    bad = ~torch.isclose(actual, expected, rtol=PARAM_EPS * info.eps, atol=info.smallest_normal, equal_nan=True)
    return mismatch(what, actual, expected, bad, PARAM_EPS * info.eps * expected.abs() + info.smallest_normal)


def gradient_problem(
    what: str, actual: torch.Tensor | None, expected: tuple[torch.Tensor, torch.Tensor]
) -> Problem | None:
    """None if ``actual`` (None counts as zeros) is within the bound of the exact value, else the worst
    difference."""
    mean, bound = expected
    actual = torch.zeros_like(mean) if actual is None else actual
    error = (actual.double() - mean).abs()
    return mismatch(what, actual, mean, ~(error <= bound), bound, error)


# ---------------------------------------------------------------------------
# on the ranks


def _owners(optimizer: Any, model: nn.Module) -> dict[str, int] | None:
    """Parameter name -> the rank whose ZeRO shard holds it, where the optimizer tells."""
    table = getattr(optimizer, "_param_to_rank", None)
    if not isinstance(table, dict):
        return None
    try:
        return {name: int(table[p]) for name, p in model.named_parameters()}
    except KeyError:
        return None


def join_training(
    ctx: RankContext,
    case: JoinCase,
    seed: int,
    dtype: torch.dtype,
    ddp_class: type[Any] = DistributedDataParallel,
    optimizer_class: type[Any] = ZeroRedundancyOptimizer,
) -> dict[str, Any]:
    """On every rank: train on ``case.counts[rank]`` batches inside the join context, catching what
    it raises; check the gradients and parameters against the reference (see the module docstring).
    Returns the problems, the steps completed, what was raised, and digests."""
    if case.world_size != ctx.world_size:
        raise InvalidArgument(
            f"the case is for {case.world_size} ranks; this pool has {ctx.world_size}: "
            f"draw it with join_cases({ctx.world_size})"
        )
    model = case.build_model(seed, dtype)
    ddp = ddp_class(model, process_group=ctx.group)
    if case.zero:
        cls, kwargs = case.optimizer_args()
        optimizer = optimizer_class(ddp.parameters(), optimizer_class=cls, process_group=ctx.group, **kwargs)
        context = Join(
            [ddp, optimizer],
            throw_on_early_termination=case.throw_on_early_termination,
            divide_by_initial_world_size=case.divide_by_initial_world_size,
        )
    else:
        optimizer = case.build_optimizer(ddp.parameters())
        context = ddp.join(
            divide_by_initial_world_size=case.divide_by_initial_world_size,
            throw_on_early_termination=case.throw_on_early_termination,
        )
    grads_seen: list[dict[str, torch.Tensor | None]] = []
    params_seen: list[dict[str, torch.Tensor]] = []
    raised: tuple[str, str] | None = None
    try:
        with context:
            for step in range(case.counts[ctx.rank]):
                x, y = case.make_batch(ctx.rank, step, seed, dtype)
                nn.functional.mse_loss(ddp(x), y).backward()
                grads_seen.append(
                    {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}
                )
                optimizer.step()
                optimizer.zero_grad(set_to_none=case.set_to_none)
                params_seen.append({n: p.detach().clone() for n, p in model.named_parameters()})
    except RuntimeError as exc:
        raised = (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    final = {n: p.detach().clone() for n, p in model.named_parameters()}

    problems = _check_steps(
        case, seed, dtype, ctx.rank, grads_seen, params_seen, final, _owners(optimizer, model) if case.zero else None
    )
    if len(grads_seen) > case.steps:
        problems.append(
            Problem(
                Kind.NOTE, detail=f"completed step {case.steps}, documented: every rank raises after {case.steps} steps"
            )
        )
    if case.throws and raised is None:
        problems.append(
            Problem(
                Kind.MISSING,
                detail=f"raised nothing; documented: every rank raises a RuntimeError "
                f"once one rank runs out of inputs (counts {case.counts})",
            )
        )
    if raised is not None and not case.throws:
        problems.append(Problem(Kind.RAISED, error=raised[0], error_text=raised[1]))
    if case.throws and len(params_seen) != case.steps:
        problems.append(
            Problem(
                Kind.MISMATCH,
                "steps completed before raising",
                got=len(params_seen),
                expected=case.steps,
                detail="(documented: the first rank's end of data)",
            )
        )
    return {
        "problems": problems,
        "steps": len(params_seen),
        "raised": raised,
        "grad_digests": [
            digest({n: g if g is not None else torch.zeros(0) for n, g in grads.items()}) for grads in grads_seen
        ],
        "final_digest": digest(final),
    }


def _check_steps(
    case: JoinCase,
    seed: int,
    dtype: torch.dtype,
    rank: int,
    grads_seen: list[dict[str, torch.Tensor | None]],
    params_seen: list[dict[str, torch.Tensor]],
    final: dict[str, torch.Tensor],
    owners: dict[str, int] | None,
) -> list[Problem]:
    """Check one rank's steps, each from the parameters it started from (the previous step's, once
    checked): its gradients against ``expected_gradients`` at those parameters, its parameters after
    the step against a local optimizer's step from them with those (checked) gradients; and, on a
    rank with the most batches (the model every rank ends with), its final parameters against its
    last step's.  A step whose parameters are wrong but equal what ``stale_shard_gradients`` gives
    (with ``owners``) says so (:attr:`~fuzzdist.problems.Symptom.STALE_SHARD`)."""
    documented = LocalStepper(case, seed, dtype)
    stale = LocalStepper(case, seed, dtype) if owners is not None else None
    start = {n: p.detach().clone() for n, p in documented.model.named_parameters()}
    found: list[Problem] = []
    for step, (grads, after) in enumerate(zip(grads_seen[: case.steps], params_seen, strict=False)):
        bounds = expected_gradients(documented.load(start), case, step, seed, dtype)
        found.extend(
            p for n, g in grads.items() if (p := gradient_problem(f"step {step}: grad {n}", g, bounds[n])) is not None
        )
        expected = documented.step(start, grads)
        wrong = [p for n in after if (p := param_problem(f"after step {step}: param {n}", after[n], expected[n]))]
        if wrong and stale is not None and owners is not None:
            alternative = stale.step(start, stale_shard_gradients(case, step, grads, owners))
            if all(param_problem("", after[n], alternative[n]) is None for n in after):
                wrong = [p.with_symptom(Symptom.STALE_SHARD) for p in wrong]  # exactly what the known bug computes
        elif stale is not None and owners is not None:
            stale.step(start, stale_shard_gradients(case, step, grads, owners))
        found.extend(wrong)
        start = after
    if case.counts[rank] == max(case.counts) or case.throws:
        # the model every rank ends with: this rank's after its last step
        found.extend(
            p
            for n in final
            if (
                p := param_problem(
                    f"after the join context ({len(params_seen)} steps): param {n} "
                    "(not this rank's after its last step)",
                    final[n],
                    start[n],
                )
            )
            is not None
        )
    return capped(found)


# ---------------------------------------------------------------------------
# the driver-side check


def check_results(case: JoinCase, results: Sequence[dict[str, Any]]) -> None:
    """Raise :class:`PropertyFailure` if any rank reported a problem, or the ranks active at a step
    disagree bitwise on its gradients, or the ranks' final parameters are not bitwise equal."""
    fail_on_reported_problems(
        results, "uneven inputs under Join differ from the documented reference", [obs["problems"] for obs in results]
    )
    for step in range(case.steps):
        digests = {
            r: results[r]["grad_digests"][step] for r in case.active(step) if step < len(results[r]["grad_digests"])
        }
        if len(set(digests.values())) > 1:
            raise PropertyFailure(f"step {step}: the active ranks' gradients differ bitwise", list(results))
    if len({obs["final_digest"] for obs in results}) > 1:
        raise PropertyFailure("the final parameters are not bitwise equal on every rank", list(results))


def check(
    pool: Pool,
    case: JoinCase,
    seed: int,
    dtype: torch.dtype = torch.float32,
    *,
    ddp_class: type[Any] = DistributedDataParallel,
    optimizer_class: type[Any] = ZeroRedundancyOptimizer,
) -> None:
    """Train ``case`` with uneven inputs under ``Join`` on every rank of ``pool``, with ``ddp_class``
    (and, for ``case.zero``, ``optimizer_class``; both importable on the ranks, with the interfaces of
    ``DistributedDataParallel`` and ``ZeroRedundancyOptimizer``); raise :class:`PropertyFailure` if a
    rank differs from the documented reference or from the others.  Arguments that can't describe a run
    raise :class:`~fuzzdist.errors.InvalidArgument` before any rank runs."""
    if not isinstance(case, JoinCase):
        raise InvalidArgument(f"case must be a JoinCase (draw one with join_cases), got {type(case).__name__}")
    if case.world_size != pool.world_size:
        raise InvalidArgument(
            f"the case is for {case.world_size} ranks; this pool has {pool.world_size}: "
            f"draw it with join_cases({pool.world_size})"
        )
    check_model_dtype_and_seed(dtype, seed)
    if not isinstance(ddp_class, type) or not issubclass(ddp_class, DistributedDataParallel):
        raise InvalidArgument(
            f"ddp_class must be DistributedDataParallel or a subclass of it (Join needs its join "
            f"hook), got {ddp_class!r}"
        )
    if not isinstance(optimizer_class, type):
        raise InvalidArgument(
            f"optimizer_class must be a class with ZeroRedundancyOptimizer's constructor and "
            f"join hook, got {optimizer_class!r}"
        )
    with known_failures("join", case=case, seed=seed, dtype=dtype):
        results = pool.run(join_training, case, seed, dtype, ddp_class=ddp_class, optimizer_class=optimizer_class)
        check_results(case, results)
