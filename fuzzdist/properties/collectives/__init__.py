"""Autograd collectives: every ``torch.distributed.nn`` collective's forward values and input
gradients equal a single-process reference computed from all ranks' inputs and upstream gradients.

Covered: broadcast, reduce, all_reduce, all_gather, gather, scatter, all_to_all,
all_to_all_single and reduce_scatter from ``torch.distributed.nn.functional``, on CPU ranks
over gloo, for world sizes 2 and 3.  Each rank's inputs and upstream gradients are rebuilt from
(spec, seed) on every rank, so each rank computes the whole reference itself.

Reference gradients, derived by hand (W ranks; x_s = rank s's input, g_s = rank s's upstream
gradient for its output; for list outputs g_s[k] is the gradient of rank s's k-th output):

* broadcast(x, src): y_s = x_src for every s.  grad x_src = sum_s g_s; grad x_r = 0 for r != src.
* reduce(x, dst, op): y_dst = op over s of x_s; the other ranks' outputs are unspecified (gloo leaves
  partial sums there), so they are neither checked nor differentiated: grad x_r is the gradient of
  y_dst (as for all_reduce below, with g_dst the only upstream gradient): g_dst for SUM.
* all_reduce(x, SUM): y_s = sum_t x_t.  grad x_r = sum_s g_s.  AVG: grad x_r = (1/W) sum_s g_s.
  PRODUCT: grad x_r = (sum_s g_s) * prod_{t != r} x_t.  MIN/MAX: grad x_r = sum_s g_s where x_r
  is the only rank holding the extreme, 0 where it does not hold it; where several ranks hold it
  the split between them is not defined, and those elements are not checked.
* all_gather(x): y_s[k] = x_k.  grad x_r = sum_s g_s[r].
* gather(x, dst): y_dst[k] = x_k; the other ranks' outputs are constant.  grad x_r = g_dst[r].
* scatter(xs, src) (every rank passes W tensors): y_r = xs_src[r].  On src: grad xs[j] = g_j;
  elsewhere the inputs are unused: grad xs[j] = 0.
* all_to_all(outs, xs): y_r[i] = xs_i[r].  grad xs_r[j] = g_j[r].
* all_to_all_single(out, x, out_splits, in_splits): rank i sends rows S[i][j] of x_i to rank j,
  in order; y_r = cat_i(block of x_i for r).  grad x_r = cat_j(block of g_j that came from r).
* reduce_scatter(out, xs, op): y_r = op over s of xs_s[r].  grad xs_r[j] is the gradient of y_j with
  respect to its term xs_r[j], with upstream gradient g_j: g_j for SUM.

Known torch bugs, drawn like any other input: the check runs inside
``known_failures("collectives", ...)`` (:mod:`fuzzdist.known_bugs`), and a failure with exactly their
symptom is tallied as a sighting, not raised.  The rank functions say when a wrong result is exactly
what the bug computes (a problem's ``symptom``: ``Symptom.STRIDES_IGNORED``, ``FORWARD_OP_ON_GRADS``), and
the predicates look for that:

* ``nn-all-reduce-backward-non-sum``: ``_AllReduce.backward`` all-reduces the upstream gradients
  with the *forward's* op (right for SUM and AVG; for MAX it returns the max of the gradients, for
  PRODUCT their product).  all_reduce draws every op with gradients.
* ``nn-reduce-backward-ignores-op``: the backward of reduce (a broadcast of g_dst) and of reduce_scatter
  (an all_gather) ignore the op: every input gradient is SUM's, wrong for AVG, PRODUCT, MIN and MAX.
  They draw every op with gradients too (``SUM_GRAD_FOR_ANY_OP``).
* ``gloo-scatter-ignores-strides`` (pytorch/pytorch issues 24836 and 192920, open): gloo's
  ``dist.scatter`` copies row-major bytes into the storage of a non-contiguous output.  all_to_all
  on gloo is built from scatters, so its output tensors are drawn in every layout.
* ``nn-all-gather-grad-transposed``: all_gather's backward on gloo is an all_to_all built from
  scatters into ``torch.empty_like(upstream gradient)``, so a transposed (or channels_last)
  upstream gradient gives a silently wrong input gradient.  Upstream gradients take every layout.

Found in torch's source (torch/distributed/nn/functional.py), and left out by construction:

* ``all_to_all_single`` hands its input to ``dist.all_to_all_single`` without ``.contiguous()``:
  a non-contiguous input raises "Tensors must be contiguous", so its inputs are drawn contiguous
  or sliced only (its upstream gradients may have any layout: the backward makes them contiguous).
* Every rank uses the same input layout: scatter's forward and gather's backward scatter into
  ``zeros_like`` of the receiver's own tensor (see gloo-scatter-ignores-strides), right only while
  sender and receiver agree on the layout.
* PRODUCT over float16 can overflow in some reduction orders and not others (values reach 2**8,
  float16's max is 65504): it is drawn, and the reference accepts what some order of the
  products gives, overflow included.  The gradient of PRODUCT is compared only where every
  partial product stays within the dtype's normal range (``products_in_range``).

The ops drawn are those the installed gloo takes (:func:`fuzzdist.pool.capabilities.gloo_reduce_ops`:
torch 2.6.0's refuses AVG, which its ``ReduceOp`` docstring promises for NCCL only).  Then probed on
the ranks once per pool, and left out (with a warning) where the installed torch/gloo raises:
float16/bfloat16 per collective and op, and the ops AVG/PRODUCT/MIN/MAX; reduce_scatter is skipped as
a whole where gloo lacks it (torch 2.6.0: "ProcessGroupGloo does not support reduce_scatter").

Comparisons: data movement is checked bitwise (any value, NaN payloads and -0.0 included).
Reductions by the reference every property and ``check-pg`` share (:mod:`fuzzdist.toolkit.oracle`):
exactly what some order of pairwise operations in the dtype gives (up to 5 ranks; beyond, the
worst-case rounding bound W * eps * sum|x|), with inputs drawn without special values (inf - inf is
order-dependent).

Generalises ``TestDistributedNNFunctions`` in torch's ``test_c10d_spawn_gloo.py`` (seed 003: each
collective on fixed inputs) to drawn dtypes, shapes, layouts, roots, reduce ops, split sizes and
upstream gradients.  Importing this module raises ImportError where torch has no
``torch.distributed.nn``.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnn
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import CapabilityError, InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.pool.capabilities.gloo import gloo_reduce_ops
from fuzzdist.pool.capabilities.per_pool import probed_once
from fuzzdist.problems import Kind, Problem, Symptom, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.strategies import TensorSpec, seeds
from fuzzdist.toolkit.checks import first_difference, mismatch, written_ignoring_strides
from fuzzdist.toolkit.oracle import reduction_problem

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

COLLECTIVES = (
    "broadcast",
    "reduce",
    "all_reduce",
    "all_gather",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "reduce_scatter",
)
ROOTED = ("broadcast", "reduce", "gather", "scatter")  # these take a drawn source/destination rank
REDUCTIONS = ("reduce", "all_reduce", "reduce_scatter")
REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX")  # shrink order: SUM first
# The ops whose gradients are checked (see the module docstring); the others: forward only.
GRAD_OPS = {"reduce": REDUCE_OPS, "all_reduce": REDUCE_OPS, "reduce_scatter": REDUCE_OPS}
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
BASE_DTYPES = (torch.float32, torch.float64)  # always drawn; probed only for reduce_scatter
MAX_BYTES = 1024
MAX_SPLIT = 3  # rows per (sender, receiver) block of all_to_all_single
SEEDS = seeds()


@dataclass(frozen=True)
class Case:
    """One example: every rank's inputs and upstream gradients are rebuilt from it.

    ``spec`` describes each input tensor (for all_to_all_single: all but its first dim, which
    ``splits`` sets per rank).  ``root`` is the source or destination rank, ``op`` the ReduceOp
    name (None for data movement), ``grad`` whether gradients are checked, ``grad_layout`` the
    layout of the upstream gradients (contiguous where it doesn't fit), ``splits[i][j]`` the rows
    rank i sends rank j in all_to_all_single, passed explicitly when ``explicit_splits``,
    ``out_layout`` the layout of all_to_all's output tensors (contiguous where it doesn't fit).
    """

    spec: TensorSpec
    seed: int
    root: int = 0
    op: str | None = None
    grad: bool = True
    grad_layout: str = "contiguous"
    splits: tuple[tuple[int, ...], ...] = ()
    explicit_splits: bool = False
    out_layout: str = "contiguous"


# ---------------------------------------------------------------------------
# inputs and upstream gradients, rebuilt identically on every rank


def _sub_seed(seed: int, role: int, rank: int, index: int) -> int:
    return ((seed * 4 + role) * 64 + rank) * 64 + index


def _x(
    case: Case, device: str | torch.device, rank: int, index: int = 0, spec: TensorSpec | None = None
) -> torch.Tensor:
    """Rank ``rank``'s ``index``-th input (a fresh tensor every call)."""
    return (spec or case.spec).materialize(device, _sub_seed(case.seed, 0, rank, index))


def _laid_out(shape: tuple[int, ...], dtype: torch.dtype, layout: str) -> TensorSpec:
    """A random-valued spec of ``shape`` in ``layout``, or contiguous where the layout can't hold."""
    try:
        return TensorSpec(tuple(shape), dtype, layout, "random", 3 if layout == "sliced" else 0)
    except ValueError:  # the layout can't hold for this shape
        return TensorSpec(tuple(shape), dtype)


def _g(case: Case, shape: tuple[int, ...], device: str | torch.device, rank: int, index: int = 0) -> torch.Tensor:
    """Rank ``rank``'s upstream gradient for its ``index``-th output: random values, drawn layout."""
    spec = _laid_out(shape, case.spec.dtype, case.grad_layout)
    return spec.materialize(device, _sub_seed(case.seed, 1, rank, index))


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.requires_grad_()


def _op(case: Case) -> Any:
    assert case.op is not None, "a reducing collective's case always has an op"
    return getattr(dist.ReduceOp, case.op)


# ---------------------------------------------------------------------------
# comparisons: each returns None, or the Problem


def _exact(what: str, actual: torch.Tensor, expected: torch.Tensor) -> Problem | None:
    return first_difference(actual.detach(), expected, what)


def _reduced(what: str, actual: torch.Tensor, terms: list[torch.Tensor], op: str | None) -> Problem | None:
    """Check ``actual`` against ``op`` over ``terms`` (one tensor per rank, in rank order), by the
    reference every reduction in fuzzdist uses (:func:`fuzzdist.toolkit.oracle.reduction_problem`)."""
    if op is None:
        raise RuntimeError("fuzzdist bug: a reduction case without its op")
    return reduction_problem(what, op, [t.detach() for t in terms], actual.detach())


def products_in_range(terms: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per element of ``terms`` (stacked along dim 0, one per rank, float64), whether every partial product
    of the terms, in any order, stays well within ``dtype``'s normal range (or is 0).  There a product
    over the ranks rounds by at most eps per multiplication whatever the order, so the rounding bound
    holds; elsewhere one order overflows to inf (or 0 * inf = NaN) or underflows where another doesn't,
    and the result depends on gloo's order: those elements are not compared.  Matters for float16
    (largest 65504, and values reach 2**8, so three ranks' product can overflow)."""
    info = torch.finfo(dtype)
    ok = torch.ones(terms.shape[1:], dtype=torch.bool)
    for k in range(2, terms.shape[0] + 1):
        for subset in itertools.combinations(range(terms.shape[0]), k):
            p = terms[list(subset)].prod(0).abs()
            ok &= (p == 0) | ((p >= 2 * info.smallest_normal) & (p <= info.max / 2))
    return ok


def _count(what: str, outputs: Sequence[Any], expected: int) -> Problem | None:
    if len(outputs) != expected:
        return Problem(
            Kind.MISSING,
            what,
            got=len(outputs),
            expected=expected,
            detail=f"got {len(outputs)} tensors, expected {expected}",
        )
    return None


def _report(problems: list[Any]) -> list[Problem] | None:
    problems = [p for p in problems if p is not None]
    return problems or None


class _quiet(warnings.catch_warnings):
    """Silence torch.distributed.nn's FutureWarnings (deprecated in favour of functional collectives)."""

    def __enter__(self) -> list[warnings.WarningMessage] | None:
        result = super().__enter__()
        warnings.simplefilter("ignore", FutureWarning)
        return result


# ---------------------------------------------------------------------------
# rank functions: one per collective; the collective is swappable so tests can plant bugs


def broadcast_and_check(
    ctx: RankContext, case: Case, broadcast: Callable[..., Any] = dnn.broadcast
) -> list[Problem] | None:
    """``broadcast`` from case.root; checks the output and the input gradient on every rank."""
    r, w, dev, src = ctx.rank, ctx.world_size, ctx.device, case.root
    x = _leaf(_x(case, dev, r))
    expected = _x(case, dev, src)
    shape = case.spec.shape
    grads = [_g(case, shape, dev, s) for s in range(w)]
    with _quiet():
        y = broadcast(x, src, group=ctx.group)
        problems = [_exact("output", y, expected)]
        (gx,) = torch.autograd.grad(y, x, grads[r])
    if r == src:
        problems.append(_reduced("grad of input", gx, grads, "SUM"))
    else:
        zeros = torch.zeros(shape, dtype=case.spec.dtype)
        problems.append(_exact("grad of input (not the source)", gx, zeros))
    return _report(problems)


def reduce_and_check(ctx: RankContext, case: Case, reduce: Callable[..., Any] = dnn.reduce) -> list[Problem] | None:
    """``reduce`` with case.op to case.root; the output is checked on the destination only."""
    r, w, dev, dst = ctx.rank, ctx.world_size, ctx.device, case.root
    x = _leaf(_x(case, dev, r))
    xs = [_x(case, dev, s) for s in range(w)]
    problems = []
    with _quiet():
        y = reduce(x, dst, op=_op(case), group=ctx.group)
        if r == dst:
            problems.append(_reduced("output", y, xs, case.op))
        if case.grad:
            (gx,) = torch.autograd.grad(y, x, _g(case, case.spec.shape, dev, r))
            problems.append(_op_grad("grad of input", gx, xs, r, _g(case, case.spec.shape, dev, dst), case.op))
    return _report(problems)


def all_reduce_and_check(
    ctx: RankContext, case: Case, all_reduce: Callable[..., Any] = dnn.all_reduce
) -> list[Problem] | None:
    """``all_reduce`` with case.op; checks the output and (SUM, AVG) the input gradient."""
    r, w, dev = ctx.rank, ctx.world_size, ctx.device
    x = _leaf(_x(case, dev, r))
    xs = [_x(case, dev, s) for s in range(w)]
    problems = []
    with _quiet():
        y = all_reduce(x, op=_op(case), group=ctx.group)
        problems.append(_reduced("output", y, xs, case.op))
        if case.grad:
            grads = [_g(case, case.spec.shape, dev, s) for s in range(w)]
            (gx,) = torch.autograd.grad(y, x, grads[r])
            problem = _reduction_grad("grad of input", gx, xs, r, grads, case.op)
            if problem is not None and case.op not in ("SUM", "AVG") and _reduced("", gx, grads, case.op) is None:
                problem = problem.with_symptom(Symptom.FORWARD_OP_ON_GRADS)
            problems.append(problem)
    return _report(problems)


def _op_grad(
    what: str, actual: torch.Tensor, xs: list[torch.Tensor], r: int, g: torch.Tensor, op: str | None
) -> Problem | None:
    """Check ``actual``, the gradient of x_r (``xs[r]``) for one output y = ``op`` over ``xs`` with upstream
    gradient ``g`` (reduce's destination, reduce_scatter's receiver); SUM's is ``g`` itself, bitwise.  A
    wrong gradient that is exactly ``g`` says so: what a backward that ignores the op gives."""
    if op == "SUM":
        return _exact(what, actual, g)
    only = [g if s == r else torch.zeros_like(g) for s in range(len(xs))]  # one output gets a gradient
    problem = _reduction_grad(what, actual, xs, r, only, op)
    if problem is not None and _exact("", actual, g) is None:
        problem = problem.with_symptom(Symptom.SUM_GRAD_FOR_ANY_OP)
    return problem


def _reduction_grad(
    what: str, actual: torch.Tensor, xs: list[torch.Tensor], r: int, grads: list[torch.Tensor], op: str | None
) -> Problem | None:
    """Check ``actual``, the gradient of x_r (``xs[r]``) for y = ``op`` over ``xs`` when every rank's
    output y gets upstream gradient ``grads[s]`` (see the module docstring)."""
    if op in ("SUM", "AVG"):
        return _reduced(what, actual, grads, op)
    dtype = xs[0].dtype
    if tuple(actual.shape) != tuple(xs[0].shape) or actual.dtype != dtype:
        return Problem(
            Kind.SHAPE, what, got=(tuple(actual.shape), str(actual.dtype)), expected=(tuple(xs[0].shape), str(dtype))
        )
    n = len(xs)
    x64 = torch.stack([x.detach().to(torch.float64) for x in xs])
    total = torch.stack([g.detach().to(torch.float64) for g in grads]).sum(0)
    magnitude = torch.stack([g.detach().to(torch.float64).abs() for g in grads]).sum(0)
    checked = torch.ones(x64.shape[1:], dtype=torch.bool)
    if op == "PRODUCT":
        others = torch.cat([x64[:r], x64[r + 1 :]]).prod(0)
        ref, scale = total * others, magnitude * others.abs()
        # the product of the other inputs and the upstream gradient, in any order: see products_in_range
        checked = products_in_range(torch.cat([x64[:r], x64[r + 1 :], total[None]]), dtype)
    elif op in ("MIN", "MAX"):
        extreme = x64.amin(0) if op == "MIN" else x64.amax(0)
        holders = (x64 == extreme).sum(0)
        checked = holders == 1  # a tie: how the gradient is split between the holders is not defined
        ref = torch.where(x64[r] == extreme, total, torch.zeros_like(total))
        scale = torch.where(x64[r] == extreme, magnitude, torch.zeros_like(magnitude))
    else:
        raise InvalidArgument(f"unknown op {op!r}")
    info = torch.finfo(dtype)
    bound = 2 * (n + 1) * info.eps * scale + n * info.smallest_normal * info.eps
    got = actual.detach().to(torch.float64)
    bad = ~((got - ref).abs() <= bound) & checked  # NaN counts as bad
    problem = mismatch(what, got, ref, bad, bound)
    return None if problem is None else dataclasses.replace(problem, detail=f"(the gradient of {op} over {n} ranks)")


def all_gather_and_check(
    ctx: RankContext, case: Case, all_gather: Callable[..., Any] = dnn.all_gather
) -> list[Problem] | None:
    """``all_gather``; output k is rank k's input; grad x_r = sum over ranks s of g_s[r]."""
    r, w, dev = ctx.rank, ctx.world_size, ctx.device
    shape = case.spec.shape
    x = _leaf(_x(case, dev, r))
    with _quiet():
        ys = all_gather(x, group=ctx.group)
        problems = [_count("outputs", ys, w)]
        if problems[0] is None:
            problems += [_exact(f"output {k}", ys[k], _x(case, dev, k)) for k in range(w)]
        (gx,) = torch.autograd.grad(ys, x, [_g(case, shape, dev, r, k) for k in range(len(ys))])
    received = [_g(case, shape, dev, s, r) for s in range(w)]
    problem = _reduced("grad of input", gx, received, "SUM")
    if problem is not None:
        # gloo's backward scatters each rank's gradient into empty_like(this rank's upstream gradient)
        scattered = [written_ignoring_strides(g, _g(case, shape, dev, r, s)) for s, g in enumerate(received)]
        if all(t is not None for t in scattered) and _reduced("", gx, scattered, "SUM") is None:  # type: ignore[arg-type]
            problem = problem.with_symptom(Symptom.STRIDES_IGNORED)
    problems.append(problem)
    return _report(problems)


def gather_and_check(ctx: RankContext, case: Case, gather: Callable[..., Any] = dnn.gather) -> list[Problem] | None:
    """``gather`` to case.root; on the destination output k is rank k's input; grad x_r = g_dst[r]."""
    r, w, dev, dst = ctx.rank, ctx.world_size, ctx.device, case.root
    shape = case.spec.shape
    x = _leaf(_x(case, dev, r))
    with _quiet():
        ys = gather(x, dst, group=ctx.group)
        problems = [_count("outputs", ys, w)]
        if problems[0] is None and r == dst:
            problems += [_exact(f"output {k}", ys[k], _x(case, dev, k)) for k in range(w)]
        (gx,) = torch.autograd.grad(ys, x, [_g(case, shape, dev, r, k) for k in range(len(ys))])
    problems.append(_exact("grad of input", gx, _g(case, shape, dev, dst, r)))
    return _report(problems)


def scatter_and_check(ctx: RankContext, case: Case, scatter: Callable[..., Any] = dnn.scatter) -> list[Problem] | None:
    """``scatter`` from case.root (every rank passes W tensors); y_r = xs_src[r]."""
    r, w, dev, src = ctx.rank, ctx.world_size, ctx.device, case.root
    shape = case.spec.shape
    xs = [_leaf(_x(case, dev, r, j)) for j in range(w)]
    with _quiet():
        y = scatter(xs, src, group=ctx.group)
        problems = [_exact("output", y, _x(case, dev, src, r))]
        gxs = torch.autograd.grad(y, xs, _g(case, shape, dev, r))
    zeros = torch.zeros(shape, dtype=case.spec.dtype)
    for j, gx in enumerate(gxs):
        if r == src:
            problems.append(_exact(f"grad of input {j}", gx, _g(case, shape, dev, j)))
        else:
            problems.append(_exact(f"grad of input {j} (not the source)", gx, zeros))
    return _report(problems)


def all_to_all_and_check(
    ctx: RankContext, case: Case, all_to_all: Callable[..., Any] = dnn.all_to_all
) -> list[Problem] | None:
    """``all_to_all``: y_r[i] = xs_i[r]; grad xs_r[j] = g_j[r]."""
    r, w, dev = ctx.rank, ctx.world_size, ctx.device
    shape, dtype = case.spec.shape, case.spec.dtype
    xs = [_leaf(_x(case, dev, r, j)) for j in range(w)]
    out_spec = _laid_out(shape, dtype, case.out_layout)
    outs = [out_spec.materialize(dev, 0).zero_() for _ in range(w)]
    with _quiet():
        ys = all_to_all(outs, xs, group=ctx.group)
        problems = [_count("outputs", ys, w)]
        if problems[0] is None:
            for i in range(w):
                problem = _exact(f"output {i}", ys[i], _x(case, dev, i, r))
                if problem is not None:
                    # gloo's all_to_all scatters into the output tensors
                    scattered = written_ignoring_strides(_x(case, dev, i, r), out_spec.materialize(dev, 0))
                    if scattered is not None and _exact("", ys[i], scattered) is None:
                        problem = problem.with_symptom(Symptom.STRIDES_IGNORED)
                problems.append(problem)
        gxs = torch.autograd.grad(ys, xs, [_g(case, shape, dev, r, i) for i in range(len(ys))])
    problems += [_exact(f"grad of input {j}", gx, _g(case, shape, dev, j, r)) for j, gx in enumerate(gxs)]
    return _report(problems)


def _a2a_spec(case: Case, rows: int) -> TensorSpec:
    return dataclasses.replace(case.spec, shape=(rows,) + case.spec.shape[1:])


def all_to_all_single_and_check(
    ctx: RankContext, case: Case, all_to_all_single: Callable[..., Any] = dnn.all_to_all_single
) -> list[Problem] | None:
    """``all_to_all_single`` with split sizes case.splits (explicit, or None when even)."""
    r, w, dev = ctx.rank, ctx.world_size, ctx.device
    split = case.splits
    rest, dtype = case.spec.shape[1:], case.spec.dtype
    rows_in = [sum(split[i]) for i in range(w)]
    rows_out = [sum(split[i][j] for i in range(w)) for j in range(w)]

    def x_of(s: int) -> torch.Tensor:
        return _x(case, dev, s, spec=_a2a_spec(case, rows_in[s]))

    def g_of(s: int) -> torch.Tensor:
        return _g(case, (rows_out[s],) + rest, dev, s)

    def block(t: torch.Tensor, start: int, length: int) -> torch.Tensor:
        return t.narrow(0, start, length)

    x = _leaf(x_of(r))
    out = torch.empty((rows_out[r],) + rest, dtype=dtype, device=dev)
    out_splits = [split[i][r] for i in range(w)] if case.explicit_splits else None
    in_splits = list(split[r]) if case.explicit_splits else None
    # rank i's block for rank r starts after the rows i sends to ranks before r
    expected = torch.cat([block(x_of(i), sum(split[i][:r]), split[i][r]) for i in range(w)])
    with _quiet():
        y = all_to_all_single(out, x, out_splits, in_splits, group=ctx.group)
        problems = [_exact("output", y, expected)]
        (gx,) = torch.autograd.grad(y, x, g_of(r))
    # in rank j's output, the rows from rank r start after the rows from ranks before r
    expected_grad = torch.cat([block(g_of(j), sum(split[i][j] for i in range(r)), split[r][j]) for j in range(w)])
    problems.append(_exact("grad of input", gx, expected_grad))
    return _report(problems)


def reduce_scatter_and_check(
    ctx: RankContext, case: Case, reduce_scatter: Callable[..., Any] = dnn.reduce_scatter
) -> list[Problem] | None:
    """``reduce_scatter`` with case.op: y_r = op over ranks s of xs_s[r]; grad xs_r[j] = g_j (SUM)."""
    r, w, dev = ctx.rank, ctx.world_size, ctx.device
    shape, dtype = case.spec.shape, case.spec.dtype
    xs = [_leaf(_x(case, dev, r, j)) for j in range(w)]
    out = torch.empty(shape, dtype=dtype, device=dev)
    problems = []
    with _quiet():
        y = reduce_scatter(out, xs, op=_op(case), group=ctx.group)
        problems.append(_reduced("output", y, [_x(case, dev, s, r) for s in range(w)], case.op))
        if case.grad:  # rank r's entry j is a term of rank j's output
            gxs = torch.autograd.grad(y, xs, _g(case, shape, dev, r))
            problems += [
                _op_grad(
                    f"grad of input {j}",
                    gx,
                    [_x(case, dev, s, j) for s in range(w)],
                    r,
                    _g(case, shape, dev, j),
                    case.op,
                )
                for j, gx in enumerate(gxs)
            ]
    return _report(problems)


CHECKS = {
    "broadcast": broadcast_and_check,
    "reduce": reduce_and_check,
    "all_reduce": all_reduce_and_check,
    "all_gather": all_gather_and_check,
    "gather": gather_and_check,
    "scatter": scatter_and_check,
    "all_to_all": all_to_all_and_check,
    "all_to_all_single": all_to_all_single_and_check,
    "reduce_scatter": reduce_scatter_and_check,
}


# ---------------------------------------------------------------------------
# what the installed torch/gloo supports: probed on the ranks, once per pool and collective


def _probe_case(name: str, dtype: torch.dtype, op: str | None, world_size: int) -> Case:
    shape = (world_size, 2) if name == "all_to_all_single" else (2,)
    splits = tuple(tuple(1 for _ in range(world_size)) for _ in range(world_size))
    grad = op is None or op in GRAD_OPS.get(name, ())
    return Case(TensorSpec(shape, dtype), 0, 0, op, grad, "contiguous", splits, False)


def probe_support(
    ctx: RankContext, name: str, combos: list[tuple[torch.dtype, str | None]]
) -> dict[tuple[torch.dtype, str | None], str | None]:
    """On every rank: for each (dtype, op), None if the collective ran forward and backward
    without raising, else the error.  Wrong values are the property's business, not the probe's."""
    errors: dict[tuple[torch.dtype, str | None], str | None] = {}
    for dtype, op in combos:
        try:
            CHECKS[name](ctx, _probe_case(name, dtype, op, ctx.world_size))
            errors[(dtype, op)] = None
        except Exception as exc:  # noqa: BLE001 - an unsupported combination raises on every rank
            first_line = str(exc).splitlines()[0][:200] if str(exc) else ""
            errors[(dtype, op)] = f"{type(exc).__name__}: {first_line}"
    return errors


def supported(pool: Pool, name: str) -> list[tuple[torch.dtype, str | None]]:
    """The (dtype, op) pairs the property draws for ``name`` on this pool's torch/gloo, probed on the
    ranks once per pool (:func:`fuzzdist.pool.capabilities.probed_once`); warns for each pair left
    out, and raises CapabilityError (the calling test skips) where gloo has no reduce_scatter at all."""
    return probed_once(pool, ("autograd collectives", name), lambda: _probe_supported(pool, name))


def _candidate_ops(name: str, dtype: torch.dtype) -> tuple[str | None, ...]:
    """The ops worth probing ``name`` with on the ranks for ``dtype``: of REDUCE_OPS, those the installed
    gloo takes (:func:`~fuzzdist.pool.capabilities.gloo_reduce_ops`, asked once per process: torch 2.6.0
    refuses AVG).  reduce_scatter's list form can't be asked at world size 1 (2.6.0's gloo lacks it):
    all_reduce's answer stands for it, and the probe on the ranks settles the rest.  None: data movement."""
    if name not in REDUCTIONS:
        return (None,)
    taken = gloo_reduce_ops("reduce" if name == "reduce" else "all_reduce", dtype)
    return tuple(op for op in REDUCE_OPS if op in taken)


def _probe_supported(pool: Pool, name: str) -> list[tuple[torch.dtype, str | None]]:
    combos = [(dt, op) for dt in FLOAT_DTYPES for op in _candidate_ops(name, dt)]
    # float32/float64 SUM (and data movement) are always drawn, so a real failure there fails
    # the property; only the optional extras (and reduce_scatter, new in gloo) are probed.
    base = {(dt, op) for dt in BASE_DTYPES for op in ("SUM", None)}
    probed = [c for c in combos if c not in base or name == "reduce_scatter"]
    per_rank = pool.run(probe_support, name, probed) if probed else [{}]
    errors = {c: next((res[c] for res in per_rank if res[c] is not None), None) for c in probed}
    if name == "reduce_scatter" and errors.get((torch.float32, "SUM")):
        raise CapabilityError(
            f"reduce_scatter is not supported on gloo CPU in torch {torch.__version__}: "
            f"{errors[(torch.float32, 'SUM')]}"
        )
    for (dt, op), err in errors.items():
        if err is not None:
            warnings.warn(
                f"fuzzdist: {name} with {dt}{'' if op is None else ' ' + op} left out: "
                f"it raises on gloo CPU in torch {torch.__version__} ({err})",
                stacklevel=3,
            )
    return [c for c in combos if errors.get(c) is None]


# ---------------------------------------------------------------------------
# strategies


@st.composite
def cases(draw: st.DrawFn, name: str, world_size: int, allowed: list[tuple[torch.dtype, str | None]]) -> Case:
    """A Case for collective ``name``; shrinks to float32 (SUM), shape (1,), root 0, even splits."""
    dtypes = [dt for dt in FLOAT_DTYPES if any(c[0] == dt for c in allowed)]
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    op = draw(st.sampled_from([op for dt, op in allowed if dt == dtype]), label="op")
    # Reductions: no inf/nan drawn (inf - inf depends on the order).
    patterns = ("random", "constant") if op is not None else None
    # all_to_all_single raises on non-contiguous inputs (see the module docstring).
    layouts = ("contiguous", "sliced") if name == "all_to_all_single" else None
    shapes = fst.shapes(max_bytes=MAX_BYTES, itemsize=dtype.itemsize, min_dims=1 if name == "all_to_all_single" else 0)
    spec = draw(
        fst.tensor_specs(shapes=shapes, dtypes=st.just(dtype), layouts=layouts, patterns=patterns), label="spec"
    )
    seed = draw(SEEDS, label="seed")
    root = draw(fst.source_ranks(world_size), label="root") if name in ROOTED else 0
    grad = op is None or op in GRAD_OPS[name]
    grad_layout = draw(st.sampled_from(fst.LAYOUTS), label="grad_layout")
    out_layout = draw(st.sampled_from(fst.LAYOUTS), label="out_layout") if name == "all_to_all" else "contiguous"
    splits: tuple[tuple[int, ...], ...] = ()
    explicit = False
    if name == "all_to_all_single":
        explicit = draw(st.booleans(), label="explicit_splits")
        if explicit:  # any rows per (sender, receiver), zeros included
            splits = tuple(tuple(draw(st.integers(0, MAX_SPLIT)) for _ in range(world_size)) for _ in range(world_size))
        else:  # split sizes None: dim 0 is divided evenly between the ranks
            k = draw(st.integers(0, MAX_SPLIT), label="rows per rank")
            splits = tuple(tuple(k for _ in range(world_size)) for _ in range(world_size))
    return Case(spec, seed, root, op, grad, grad_layout, splits, explicit, out_layout)


# ---------------------------------------------------------------------------
# the driver-side check


def check(pool: Pool, name: str, case: Case, **impl: Any) -> None:
    """Run collective ``name`` (one of ``COLLECTIVES``) on every rank of ``pool`` as ``case`` says;
    raise :class:`PropertyFailure` if any rank's outputs or input gradients differ from the
    reference.  ``impl`` swaps the collective: ``all_gather=my_all_gather`` (the rank function's
    keyword, named after the collective).  Run inside ``known_failures("collectives", ...)``: a known
    torch bug's failure is tallied, not raised."""
    with known_failures("collectives", name=name, case=case, world_size=pool.world_size):
        results = pool.run(CHECKS[name], case, **impl)
        wrong = {rank: problems for rank, problems in enumerate(results) if problems}
        if wrong:
            raise PropertyFailure(f"{name}: ranks {sorted(wrong)} differ from the reference:{by_rank(wrong)}", results)
