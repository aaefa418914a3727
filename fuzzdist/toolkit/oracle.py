"""How an output is compared with the reference, computed in the driver.

The driver rebuilds every rank's inputs from the call (spec and seed) and
each op's definition (``fuzzdist.conformance.ops``, ``OpInfo.expected``)
computes the expected outputs with plain torch on CPU, never from anything
the backend produced.  This module holds the comparisons they share.

Data movement (broadcast, gathers, scatters, all-to-all, send/recv) must be
bit-exact: NaN payloads, -0.0 and every byte of every dtype included.

Reductions follow the c10d contract, which leaves the order of operations
to the backend:

* integers and bool: exact (wrapping arithmetic is order-independent); for
  bool, SUM and MAX are OR, PRODUCT and MIN are AND, byte for byte: a bool
  holding any byte but 0 or 1 is wrong, and its message says so (gloo's
  SUM leaves the byte 2 in a bool: known torch bug gloo-bool-sum-stores-2);
* floating SUM and PRODUCT (complex: on the real view, as torch.distributed
  hands it to the backend): element by element, the result must equal what
  *some* order of pairwise operations gives (every binary tree over the
  ranks: 3 for 3 ranks, 15 for 4, 105 for 5), in the dtype or accumulated in
  float64 and rounded once to the dtype (a backend may accumulate in a wider
  type); beyond 5 ranks a rounding bound of ``world_size * eps * sum |x|``.  Values compare with
  ``==`` (so the sign of a zero sum is not checked) and any NaN matches NaN;
* MIN and MAX: the minimum (maximum) by value (so -0.0 and 0.0 are the
  same); where an input is NaN, NaN or any of the inputs (the result then
  depends on the backend's comparisons and their order: gloo's
  ``min(0.0, min(nan, -inf))`` is 0.0);
* AVG: what summing in the dtype in any order, then dividing, gives, or
  dividing first, then summing (up to 5 ranks); or the float64 mean within
  ``(world_size + 1) * eps * mean |x|``; NaN where the mean is NaN, the same
  infinity where it is infinite; where a partial sum can overflow the
  dtype, an infinity or (with an infinite input) NaN.

After an allreduce, every rank must also hold bitwise the same result
(``ops/allreduce.py``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import Any

import torch

from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Kind, Problem, Symptom
from fuzzdist.toolkit.checks import first_difference, raw_bytes

_MAX_TREE_RANKS = 5
_SHOWN = 12  # values shown per tensor in a message
_WIDE_UNSIGNED = tuple(getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n))


# -- formatting ------------------------------------------------------------------------


def show(t: torch.Tensor, limit: int = _SHOWN) -> str:
    """A tensor's values, flat, the first ``limit`` of them."""
    flat = t.detach().reshape(-1)
    if flat.dtype.is_floating_point and flat.dtype.itemsize == 1:
        flat = flat.to(torch.float32)  # float8 has no printing kernels
    values = flat[:limit].tolist()
    more = f", ... ({flat.numel()} elements)" if flat.numel() > limit else ""
    return f"[{', '.join(_fmt(v) for v in values)}{more}]"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, complex):
        return f"({v.real!r}{'+' if v.imag >= 0 or math.isnan(v.imag) else '-'}{abs(v.imag)!r}j)"
    return repr(v)


# -- exact comparison ----------------------------------------------------------------------


def exact_problem(what: str, actual: torch.Tensor, expected: torch.Tensor) -> Problem | None:
    """None if ``actual`` is bitwise ``expected``, else the first difference, with both values shown."""
    diff = first_difference(actual, expected, what)
    if diff is None:
        return None
    return dataclasses.replace(diff, detail=f"\n      expected: {show(expected)}\n      actual:   {show(actual)}")


# -- reductions -------------------------------------------------------------------------


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex or dtype.is_floating_point:
        return "float"
    return "int"


def _comparable(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return torch.view_as_real(t).reshape(-1) if t.is_complex() else t.reshape(-1)


_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "SUM": torch.add,
    "PRODUCT": torch.mul,
    "MIN": torch.minimum,
    "MAX": torch.maximum,
    "BAND": torch.bitwise_and,
    "BOR": torch.bitwise_or,
    "BXOR": torch.bitwise_xor,
}
_BOOL: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "SUM": torch.logical_or,
    "MAX": torch.logical_or,
    "PRODUCT": torch.logical_and,
    "MIN": torch.logical_and,
    "BAND": torch.logical_and,
    "BOR": torch.logical_or,
    "BXOR": torch.logical_xor,
}


def _fold(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], xs: list[torch.Tensor]) -> torch.Tensor:
    acc = xs[0]
    for x in xs[1:]:
        acc = fn(acc, x)
    return acc


def exact_reduction(reduce_op: str, xs: list[torch.Tensor]) -> torch.Tensor:
    """Integer and bool reductions, in rank order (any order gives the same)."""
    dtype = xs[0].dtype
    if dtype == torch.bool:
        return _fold(_BOOL[reduce_op], xs)
    if dtype in _WIDE_UNSIGNED:  # no CPU arithmetic kernels: compute on int64 bits
        if dtype == torch.uint64:
            sign = torch.tensor(-(2**63), dtype=torch.int64)
            bits = [x.view(torch.int64) for x in xs]
            if reduce_op in ("MIN", "MAX"):  # unsigned order = signed order with the top bit flipped
                flipped = [b ^ sign for b in bits]
                return (_fold(_BINARY[reduce_op], flipped) ^ sign).view(dtype)
            return _fold(_BINARY[reduce_op], bits).view(dtype)
        return _fold(_BINARY[reduce_op], [x.to(torch.int64) for x in xs]).to(dtype)
    return _fold(_BINARY[reduce_op], xs)


def _trees(xs: list[torch.Tensor], fn: Callable, idx: tuple[int, ...], memo: dict) -> list[torch.Tensor]:
    """fn over xs[idx] in every order of pairwise operations (fn is commutative)."""
    if len(idx) == 1:
        return [xs[idx[0]]]
    if idx in memo:
        return memo[idx]
    first, rest = idx[0], idx[1:]
    out = []
    for size in range(len(rest)):  # the left part holds `first` and `size` others
        for others in itertools.combinations(rest, size):
            left = (first, *others)
            right = tuple(i for i in rest if i not in others)
            for a in _trees(xs, fn, left, memo):
                for b in _trees(xs, fn, right, memo):
                    out.append(fn(a, b))
    memo[idx] = out
    return out


def _same_value(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a == b) | (a.isnan() & b.isnan())


def _float_reduction(
    reduce_op: str,
    xs: list[torch.Tensor],
    actual: torch.Tensor,
    complex_inputs: list[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(elements that conform, the value shown as expected, how to read it) for float dtypes
    (complex ones on their real view; ``complex_inputs``: the complex values themselves)."""
    world = len(xs)
    dtype = xs[0].dtype
    finfo = torch.finfo(dtype)
    if reduce_op in ("SUM", "PRODUCT"):
        fn = _BINARY[reduce_op]
        in_order = _fold(fn, xs)
        if world <= _MAX_TREE_RANKS:
            candidates = _trees(xs, fn, tuple(range(world)), {})
            # A backend may also accumulate in a wider type and round once (gloo's float16 sums in
            # some paths): any order in float64, rounded to the dtype.
            wider = [c.to(dtype) for c in _trees([x.double() for x in xs], fn, tuple(range(world)), {})]
            ok = torch.zeros_like(actual, dtype=torch.bool)
            for c in candidates + wider:
                ok |= _same_value(actual, c)
            note = (
                "ranks reduced in rank order"
                + (f"; any of the {len(candidates)} orders is accepted" if len(candidates) > 1 else "")
                + ", in the dtype or accumulated in float64 and rounded once"
            )
            return ok, in_order, note
        wide = torch.stack([x.double() for x in xs])
        exact = wide.sum(0) if reduce_op == "SUM" else wide.prod(0)
        scale = wide.abs().sum(0) if reduce_op == "SUM" else exact.abs()
        tol = world * finfo.eps * scale + finfo.smallest_normal * finfo.eps * world
        ok = ((actual.double() - exact).abs() <= tol) | _same_value(actual.double(), exact)
        return ok, exact.to(dtype), f"float64 result; within {world} * eps * sum|x|"
    stacked = torch.stack(xs)
    if reduce_op in ("MIN", "MAX"):
        nan = stacked.isnan()
        fill = math.inf if reduce_op == "MIN" else -math.inf
        filled = stacked.masked_fill(nan, fill)
        ref = filled.amin(0) if reduce_op == "MIN" else filled.amax(0)
        any_nan, all_nan = nan.any(0), nan.all(0)
        # With a NaN among the inputs the result depends on the backend's comparisons and
        # their order (gloo: min(0.0, min(nan, -inf)) == 0.0): NaN or any input is accepted.
        is_an_input = (stacked == actual.unsqueeze(0)).any(0)
        ok = torch.where(any_nan, actual.isnan() | is_an_input, actual == ref)
        ok = torch.where(all_nan, actual.isnan(), ok)
        shown = torch.where(all_nan, torch.full_like(ref, math.nan), ref)
        return ok, shown, "by value; where an input is NaN, NaN or any input is accepted"
    if reduce_op == "AVG":
        wide = stacked.double()
        mean = wide.sum(0) / world
        finite = wide.isfinite()
        magnitude = wide.abs().where(finite, torch.zeros_like(wide)).sum(0)
        tol = (world + 1) * finfo.eps * magnitude / world + finfo.smallest_normal * finfo.eps * world
        got = actual.double()
        ok = mean.isfinite() & ((got - mean).abs() <= tol)  # any algorithm, within rounding
        ok |= mean.isnan() & got.isnan()
        ok |= mean.isinf() & (got == mean)
        overflow = magnitude >= finfo.max  # a partial sum in the dtype may overflow
        ok |= overflow & got.isinf()
        ok |= overflow & ~finite.all(0) & got.isnan()  # ... and meet an infinity of the other sign
        if world <= _MAX_TREE_RANKS:  # exactly what summing, then dividing (or the reverse), gives
            divisor = torch.tensor(world, dtype=dtype)
            for c in _trees(xs, torch.add, tuple(range(world)), {}):
                ok |= _same_value(actual, c / divisor)
            for c in _trees([x / divisor for x in xs], torch.add, tuple(range(world)), {}):
                ok |= _same_value(actual, c)
            if complex_inputs is not None:
                # a backend handed complex tensors divides complex values (a NaN part spreads)
                cdiv = torch.tensor(world, dtype=complex_inputs[0].dtype)
                flat = [z.reshape(-1) for z in complex_inputs]
                for c in _trees(flat, torch.add, tuple(range(world)), {}):
                    ok |= _same_value(actual, torch.view_as_real(c / cdiv).reshape(-1))
                for c in _trees([z / cdiv for z in flat], torch.add, tuple(range(world)), {}):
                    ok |= _same_value(actual, torch.view_as_real(c).reshape(-1))
        return ok, mean.to(dtype), f"float64 mean; within ({world} + 1) * eps * mean|x|, or any order of sums"
    raise InvalidArgument(f"no float reference for ReduceOp.{reduce_op}")


def reduction_problem(
    what: str,
    reduce_op: str,
    inputs: list[torch.Tensor],
    actual: torch.Tensor,
) -> Problem | None:
    """None if ``actual`` is a valid ``reduce_op`` over ``inputs`` (one per rank), else what differs, with
    every rank's input at the first wrong element."""
    expected_shape = tuple(inputs[0].shape)
    if tuple(actual.shape) != expected_shape or actual.dtype != inputs[0].dtype:
        return Problem(
            Kind.SHAPE,
            what,
            got=(tuple(actual.shape), str(actual.dtype)),
            expected=(expected_shape, str(inputs[0].dtype)),
        )
    if inputs[0].dtype == torch.bool:
        expected = exact_reduction(reduce_op, inputs)
        problem = exact_problem(what, actual, expected)
        if problem is None:
            return None
        raw = actual.contiguous().view(torch.uint8)
        truth = raw != 0
        if exact_problem(what, truth, expected) is None:  # right by truth value, but not valid bools
            odd = tuple(sorted({int(b) for b in raw.reshape(-1).tolist() if b > 1}))
            return _with_inputs(
                Problem(
                    Kind.MISMATCH,
                    what,
                    got=odd,
                    count=int((raw > 1).sum()),
                    size=raw.numel(),
                    symptom=Symptom.BOOL_BYTES_NOT_0_OR_1,
                ),
                inputs,
                _first_bad_index(actual, expected),
            )
        return _with_inputs(problem, inputs, _first_bad_index(truth, expected))
    if _kind(inputs[0].dtype) != "float":
        expected = exact_reduction(reduce_op, inputs)
        problem = exact_problem(what, actual, expected)
        if problem is None:
            return None
        return _with_inputs(problem, inputs, _first_bad_index(actual, expected))
    xs = [_comparable(x) for x in inputs]
    got = _comparable(actual)
    complex_inputs = [x.detach().contiguous() for x in inputs] if inputs[0].is_complex() else None
    ok, shown, note = _float_reduction(reduce_op, xs, got, complex_inputs)
    bad = (~ok).nonzero()
    if bad.numel() == 0:
        return None
    index = int(bad[0, 0])
    return Problem(
        Kind.MISMATCH,
        what,
        index=index,
        got=got[index].item(),
        expected=shown[index].item(),
        count=bad.shape[0],
        size=got.numel(),
        inputs=tuple(x[index].item() for x in xs),
        inputs_at=index,
        unit="real-view element" if inputs[0].is_complex() else "element",
        detail=f"({note})\n      expected: {show(shown)}\n      actual:   {show(got)}",
    )


def _first_bad_index(actual: torch.Tensor, expected: torch.Tensor) -> int | None:
    a, e = _comparable(actual), _comparable(expected)
    if a.numel() != e.numel():
        return None
    for i in range(a.numel()):
        if raw_bytes(a[i : i + 1]) != raw_bytes(e[i : i + 1]):
            return i
    return None


def _with_inputs(problem: Problem, inputs: list[torch.Tensor], index: int | None) -> Problem:
    """``problem`` with every rank's input at ``index`` (the first wrong element), where there is one."""
    if index is None:
        return problem
    return dataclasses.replace(problem, inputs_at=index, inputs=tuple(_comparable(x)[index].item() for x in inputs))
