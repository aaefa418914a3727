"""Functional collectives: ``torch.distributed._functional_collectives`` give the values the c10d
collectives give, and their async results wait correctly.

Covered: ``all_reduce`` (every ReduceOp the installed gloo takes for the dtype), ``all_gather_single`` and its
deprecated alias ``all_gather_tensor`` (any gather dim), ``reduce_scatter_single`` and
``reduce_scatter_tensor`` (any scatter dim, every op), ``broadcast`` (any source) and
``all_to_all_single`` (even splits, or a drawn split matrix, empty blocks included), on CPU
ranks over gloo, every dtype gloo moves, any shape, every layout the installed torch's op takes
(:func:`fuzzdist.pool.capabilities.functional_layouts`: torch 2.6.0's ``all_gather_tensor`` asserts a
contiguous input and its ``all_to_all_single`` raises "Tensors must be contiguous" for a transposed
one; 2.13.0's take every layout), with the group given as the
ProcessGroup or as the list of its ranks.  An example issues 1 to 3 of them, then completes them
in a drawn order, each in a drawn way: ``wait_tensor(result)``, ``result.wait()``, first use
(an op on the ``AsyncCollectiveTensor`` waits implicitly), or a view first (a view op must not
wait, and the view must still wait on use).

Each completed result must equal (1) an independent reference computed on every rank from all
ranks' inputs (rebuilt from the spec and seed): data movement bitwise, reductions by the c10d
contract of ``fuzzdist.toolkit.oracle`` (any order of floating operations; bool by
truth value), and (2) bitwise, the c10d collective (``dist.all_reduce``, ...) run on a copy of the
same inputs over the same group: the same backend on the same inputs (except for AVG, where
the two forms divide differently: c10d and functional reduce_scatter AVG of complex64 were seen
1 ulp apart, both within the reference's bound).  Inputs must be left as
they were (the functional contract: "The input tensor is left unmodified").

Which ReduceOps are drawn for a dtype is asked of the installed torch
(:func:`fuzzdist.pool.capabilities.gloo_reduce_ops`): the ops both the functional and the c10d
``all_reduce`` take over gloo.  Every torch fuzzdist was run on refuses AVG over integers and bool,
PRODUCT/MIN/MAX over complex and the bitwise ops over floating dtypes; torch 2.6.0 refuses AVG
altogether ("Cannot use ReduceOp.AVG with Gloo"; its ``ReduceOp`` docstring promises AVG for NCCL
only).  The reduce-scatter forms take at least those ops (checked at a world of 2 by
``tests/pool/test_capabilities.py``).  Found: functional ``all_to_all_single`` raises "Invalid scalar type" for
complex tensors on gloo, where ``dist.all_to_all_single`` works (known bug
``gloo-functional-all-to-all-complex-raises``; still drawn).  The implementation is swappable:
``check(pool, case, functions={"broadcast": my_broadcast})`` runs the property over your own
function in place of torch's.

Modules: ``known_bugs.py``, the torch bugs this family meets (listed in :mod:`fuzzdist.known_bugs.entries`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import CallRaised
from fuzzdist.known_bugs import known_failures
from fuzzdist.pool.capabilities.gloo import FUNCTIONAL_OPS, functional_layouts, gloo_dtypes, gloo_reduce_ops
from fuzzdist.problems import Problem, Symptom, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.strategies import TensorSpec, mix_seed, seeds
from fuzzdist.toolkit.oracle import exact_problem, reduction_problem

try:
    import torch.distributed._functional_collectives as fcol
except ImportError as exc:  # pragma: no cover - torch without functional collectives
    raise ImportError(f"torch {torch.__version__} has no torch.distributed._functional_collectives") from exc

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

# the ones the installed torch has: torch 2.6 has no all_gather_single / reduce_scatter_single yet
OPS = tuple(op for op in FUNCTIONAL_OPS if hasattr(fcol, op))
COMPLETIONS = ("wait_tensor", "wait", "use", "view")
GROUP_FORMS = ("group", "ranks")
MAX_BYTES = 256
SEEDS = seeds()
# reduce_scatter_tensor is deprecated (a FutureWarning) where reduce_scatter_single exists
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def reduce_ops(dtype: torch.dtype) -> tuple[str, ...]:
    """The ReduceOps drawn for ``dtype``, SUM first: those the installed torch's gloo takes for it in
    the functional ``all_reduce`` and in c10d's, which the property compares it with (asked of torch
    once per process: :func:`fuzzdist.pool.capabilities.gloo_reduce_ops`)."""
    c10d = gloo_reduce_ops("all_reduce", dtype)
    # never empty: a dtype drawn here is one the functional all_reduce took with SUM (gloo_dtypes); were
    # c10d's to refuse it, the property fails on it, visibly, rather than leaving the dtype out
    return tuple(op for op in gloo_reduce_ops("functional", dtype) if op in c10d) or ("SUM",)


@dataclass(frozen=True)
class Call:
    """One functional collective.  ``spec`` builds every rank's input (rank r's from its own seed);
    ``dim`` is the gather or scatter dim; ``splits[i][j]`` the rows rank i sends rank j
    (``all_to_all_single``; None: even splits), rank i's input being the first ``sum(splits[i])``
    rows of its tensor; ``src`` the broadcast source."""

    op: str
    spec: TensorSpec
    reduce_op: str = "SUM"
    dim: int = 0
    src: int = 0
    splits: tuple[tuple[int, ...], ...] | None = None
    group_form: str = "group"


@dataclass(frozen=True)
class FunctionalCase:
    """Calls issued in order, then completed in ``order`` (a permutation of their indices), call i
    in the way ``completions[i]`` names."""

    calls: tuple[Call, ...]
    order: tuple[int, ...]
    completions: tuple[str, ...]
    seed: int = 0


# ---------------------------------------------------------------------------
# on the ranks


def rank_input(call: Call, index: int, rank: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s input to call ``index``: the same tensor in every process that asks."""
    t = call.spec.materialize("cpu", mix_seed(seed, index, rank))
    if call.splits is not None:
        t = t.narrow(0, 0, sum(call.splits[rank]))
    return t


def expected_problem(
    call: Call, inputs: list[torch.Tensor], rank: int, actual: torch.Tensor, what: str
) -> Problem | None:
    """None if ``actual`` is what ``call`` must give on ``rank``, from every rank's ``inputs``."""
    world = len(inputs)
    if call.op == "all_reduce":
        return reduction_problem(what, call.reduce_op, inputs, actual)
    if call.op in ("reduce_scatter_single", "reduce_scatter_tensor"):
        pieces = [x.chunk(world, call.dim)[rank] for x in inputs]
        return reduction_problem(what, call.reduce_op, pieces, actual)
    if call.op in ("all_gather_single", "all_gather_tensor"):
        expected = torch.cat(inputs, call.dim)
    elif call.op == "broadcast":
        expected = inputs[call.src]
    else:  # all_to_all_single
        blocks = []
        for i, x in enumerate(inputs):
            sizes = list(call.splits[i]) if call.splits else [x.shape[0] // world] * world
            blocks.append(x.split(sizes, 0)[rank])
        expected = torch.cat(blocks, 0)
    return exact_problem(what, actual, expected)


def _issue(call: Call, x: torch.Tensor, group: Any, rank: int, functions: Mapping[str, Callable[..., Any]]) -> Any:
    fn = functions.get(call.op) or getattr(fcol, call.op)
    if call.op == "all_reduce":
        return fn(x, call.reduce_op.lower(), group)
    if call.op in ("all_gather_single", "all_gather_tensor"):
        return fn(x, call.dim, group)
    if call.op in ("reduce_scatter_single", "reduce_scatter_tensor"):
        return fn(x, call.reduce_op.lower(), call.dim, group)
    if call.op == "broadcast":
        return fn(x, call.src, group)
    if call.splits is None:
        return fn(x, None, None, group)
    out_splits = [row[rank] for row in call.splits]
    return fn(x, out_splits, list(call.splits[rank]), group)


def _complete(result: Any, how: str) -> torch.Tensor:
    if how == "wait_tensor":
        return fcol.wait_tensor(result)
    if how == "wait":
        return result.wait() if isinstance(result, fcol.AsyncCollectiveTensor) else result
    if how == "view":
        result = result[...]  # a view op: must not wait, and must keep waiting on use
    return result.clone()  # a use: waits implicitly


def _c10d(call: Call, x: torch.Tensor, group: Any, rank: int) -> torch.Tensor:
    """The same collective through c10d, on a contiguous copy of the input."""
    world = group.size()
    x = x.contiguous().clone()
    op = getattr(dist.ReduceOp, call.reduce_op)
    if call.op == "all_reduce":
        dist.all_reduce(x, op=op, group=group)
        return x
    if call.op in ("all_gather_single", "all_gather_tensor"):
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x, group=group)
        return torch.cat(parts, call.dim)
    if call.op in ("reduce_scatter_single", "reduce_scatter_tensor"):
        stacked = torch.cat([c.contiguous() for c in x.chunk(world, call.dim)], 0)
        out = torch.empty_like(x.chunk(world, call.dim)[rank].contiguous())
        _REDUCE_SCATTER(out, stacked, op=op, group=group)
        return out
    if call.op == "broadcast":
        dist.broadcast(x, src=call.src, group=group)
        return x
    in_splits = list(call.splits[rank]) if call.splits else None
    out_splits = [row[rank] for row in call.splits] if call.splits else None
    rows = sum(out_splits) if out_splits is not None else x.shape[0]
    out = torch.empty((rows, *x.shape[1:]), dtype=x.dtype)
    dist.all_to_all_single(out, x, out_splits, in_splits, group=group)
    return out


@contextlib.contextmanager
def _naming_the_call(index: int, call: Call) -> Iterator[None]:
    """Re-raise what a call raised as a :class:`CallRaised` that names the call: the known bugs' predicates
    tie a rank's error to the call that raised it (its :class:`~fuzzdist.problems.Problem`)."""
    try:
        yield
    except Exception as exc:
        raise CallRaised(Problem.raised(exc, call=index, op=call.op)) from exc


def functional_and_check(
    ctx: RankContext, case: FunctionalCase, functions: Mapping[str, Callable[..., Any]] | None = None
) -> list[Problem] | None:
    """On every rank: issue ``case``'s calls, complete them in its order, check each result against
    the reference and the c10d collective and each input against its original; None or the problems."""
    functions = functions or {}
    world, rank = ctx.world_size, ctx.rank
    problems: list[Problem] = []
    inputs = [rank_input(call, i, rank, case.seed) for i, call in enumerate(case.calls)]
    results: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the deprecated *_tensor aliases say so
        for i, (call, x) in enumerate(zip(case.calls, inputs, strict=True)):
            group = ctx.group if call.group_form == "group" else list(range(world))
            with _naming_the_call(i, call):
                results.append(_issue(call, x, group, rank, functions))
    done: dict[int, torch.Tensor] = {}
    for i in case.order:
        with _naming_the_call(i, case.calls[i]):
            done[i] = _complete(results[i], case.completions[i])
    for i, call in enumerate(case.calls):
        found: list[Problem | None] = []
        everyone = [rank_input(call, i, r, case.seed) for r in range(world)]
        problem = expected_problem(call, everyone, rank, done[i], "")
        found.append(problem)
        c10d = _c10d(call, everyone[rank], ctx.group, rank)  # a collective: every rank, every call
        if problem is None and call.reduce_op != "AVG":  # movement ops carry "SUM"
            found.append(_invalid_bools(exact_problem("compared with c10d", done[i], c10d), c10d, done[i]))
        found.append(exact_problem("its input afterwards", inputs[i], everyone[rank]))
        problems += [dataclasses.replace(p, call=i, op=call.op) for p in found if p is not None]
    return problems or None


def _invalid_bools(diff: Problem | None, c10d: torch.Tensor, result: torch.Tensor) -> Problem | None:
    """Where c10d's result is right by truth value (equal to the functional result, which matched the
    reference) but holds bool bytes other than 0 and 1 (gloo-bool-sum-stores-2 in c10d), say so."""
    if diff is None or c10d.dtype != torch.bool:
        return diff
    raw = c10d.contiguous().view(torch.uint8)
    odd = int((raw > 1).sum())
    if not odd or exact_problem("", raw != 0, result) is not None:
        return diff
    return dataclasses.replace(
        diff,
        symptom=Symptom.BOOL_BYTES_NOT_0_OR_1,
        detail=f"(c10d's result: {odd} of {raw.numel()} bools){diff.detail}",
    )


# ---------------------------------------------------------------------------
# strategies


def _spec(draw: st.DrawFn, op: str, shape: tuple[int, ...] | None = None) -> TensorSpec:
    dtypes = st.sampled_from(gloo_dtypes("functional"))  # what this torch's functional collectives take on gloo
    layouts = functional_layouts(op)  # and the layouts this torch's ``op`` takes (2.6.0: some contiguous only)
    if shape is None:
        return draw(fst.tensor_specs(dtypes=dtypes, layouts=layouts, max_bytes=MAX_BYTES))
    return draw(fst.tensor_specs(shapes=st.just(shape), dtypes=dtypes, layouts=layouts))


@st.composite
def calls(draw: st.DrawFn, world_size: int) -> Call:
    """One call of any op; shrinks to an all_reduce SUM of a (1,) float32 tensor over the group."""
    op = draw(st.sampled_from(OPS))
    group_form = draw(st.sampled_from(GROUP_FORMS))
    if op in ("all_reduce", "broadcast"):
        spec = _spec(draw, op)
        src = draw(st.integers(0, world_size - 1)) if op == "broadcast" else 0
        reduce_op = draw(st.sampled_from(reduce_ops(spec.dtype))) if op == "all_reduce" else "SUM"
        return Call(op, spec, reduce_op=reduce_op, src=src, group_form=group_form)
    base = draw(fst.shapes(max_bytes=MAX_BYTES // 16, itemsize=1, max_dims=3, min_dims=1))
    if op in ("all_gather_single", "all_gather_tensor"):
        spec = _spec(draw, op, base)
        return Call(op, spec, dim=draw(st.integers(0, len(base) - 1)), group_form=group_form)
    if op in ("reduce_scatter_single", "reduce_scatter_tensor"):
        dim = draw(st.integers(0, len(base) - 1))
        shape = tuple(s * world_size if d == dim else s for d, s in enumerate(base))
        spec = _spec(draw, op, shape)
        return Call(op, spec, reduce_op=draw(st.sampled_from(reduce_ops(spec.dtype))), dim=dim, group_form=group_form)
    # all_to_all_single
    if draw(st.booleans()):
        splits = tuple(tuple(draw(st.integers(0, 3)) for _ in range(world_size)) for _ in range(world_size))
        rows = max(sum(row) for row in splits)
        spec = _spec(draw, op, (rows, *base[1:]))
        return Call(op, spec, splits=splits, group_form=group_form)
    shape = (base[0] * world_size, *base[1:])
    return Call(op, _spec(draw, op, shape), group_form=group_form)


@st.composite
def functional_cases(draw: st.DrawFn, world_size: int, max_calls: int = 3) -> FunctionalCase:
    """1 to ``max_calls`` calls, completed in a drawn order and drawn ways; shrinks to one
    all_reduce of a (1,) float32 tensor completed with ``wait_tensor``, seed 0."""
    n = draw(st.integers(1, max_calls))
    drawn = tuple(draw(calls(world_size)) for _ in range(n))
    order = tuple(draw(st.permutations(range(n))))
    completions = tuple(draw(st.sampled_from(COMPLETIONS)) for _ in range(n))
    return FunctionalCase(drawn, order, completions, draw(SEEDS))


# ---------------------------------------------------------------------------
# the driver-side check


def check(pool: Pool, case: FunctionalCase, *, functions: Mapping[str, Callable[..., Any]] | None = None) -> None:
    """Run ``case`` on ``pool`` with torch's functional collectives, or with ``functions`` (op name ->
    a picklable function with the functional signature) in their place; raise
    :class:`PropertyFailure` if any rank's result, or input afterwards, is wrong."""
    # the backend: a known bug of gloo's is recognised only on gloo
    with known_failures("functional", case=case, backend=getattr(pool, "backend", None)):
        results = pool.run(functional_and_check, case, functions=dict(functions or {}))
        wrong = {rank: problems for rank, problems in enumerate(results) if problems}
        if wrong:
            raise PropertyFailure(f"functional collectives wrong on ranks {sorted(wrong)}:{by_rank(wrong)}", results)
