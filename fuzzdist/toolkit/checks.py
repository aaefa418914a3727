"""Helpers properties use to compare what a rank saw with what it should have seen.

Comparisons are bitwise: NaN equals NaN with the same payload, -0.0 differs
from 0.0.  Expected values are always computed independently of the
operation under test (from the drawn spec and seed), never from its output.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from fuzzdist.problems import Kind, Problem

Digest = tuple[tuple[str, tuple[object, ...] | None], ...]
"""Named tensors' fingerprints (None for a missing tensor): equal iff the tensors are bitwise equal."""


def _byte_view(t: torch.Tensor) -> torch.Tensor:
    flat = _unit_stride(t.detach().to("cpu").contiguous().reshape(-1))
    if flat.is_complex():
        flat = _unit_stride(torch.view_as_real(flat).reshape(-1))
    return flat.view(torch.uint8)


def _unit_stride(flat: torch.Tensor) -> torch.Tensor:
    """``flat`` with stride 1, which ``view(dtype)`` needs.  ``contiguous()`` keeps any stride of
    a tensor with 0 or 1 elements (all count as contiguous): ``np.from_dlpack`` of an empty
    array gives stride 0, for one."""
    if flat.stride(-1) == 1:
        return flat
    return torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)


def bitwise_equal(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Same shape, dtype and bytes (NaN == NaN with the same payload; -0.0 != 0.0)."""
    return (
        tuple(actual.shape) == tuple(expected.shape)
        and actual.dtype == expected.dtype
        and torch.equal(_byte_view(actual), _byte_view(expected))
    )


def raw_bytes(t: torch.Tensor) -> bytes:
    """The tensor's values as bytes, in logical (row-major) order, whatever its layout or device."""
    return _byte_view(t).numpy().tobytes()


def fingerprint(t: torch.Tensor) -> tuple[object, ...]:
    """(shape, dtype, digest of the values): equal iff the tensors are bitwise equal."""
    return (tuple(t.shape), str(t.dtype), hashlib.blake2b(raw_bytes(t), digest_size=16).hexdigest())


def digest(tensors: Mapping[str, torch.Tensor | None]) -> Digest:
    """The :data:`Digest` of named tensors: what ranks compare to show they hold the same values."""
    return tuple((name, None if t is None else fingerprint(t)) for name, t in tensors.items())


def layout_problem(what: str, actual: torch.Tensor, expected: torch.Tensor) -> Problem | None:
    """None where ``actual`` has ``expected``'s shape and dtype, else the :attr:`~fuzzdist.problems.Kind.SHAPE`
    :class:`~fuzzdist.problems.Problem` about ``what`` (got and expected are (shape, dtype)): values of
    different shapes or dtypes can't be compared element by element."""
    if tuple(actual.shape) == tuple(expected.shape) and actual.dtype == expected.dtype:
        return None
    return Problem(
        Kind.SHAPE,
        what,
        got=(tuple(actual.shape), str(actual.dtype)),
        expected=(tuple(expected.shape), str(expected.dtype)),
    )


def first_difference(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> Problem | None:
    """None if bitwise equal, else the first difference as a :class:`~fuzzdist.problems.Problem` about
    ``what``: a :attr:`~fuzzdist.problems.Kind.SHAPE` one (got and expected are (shape, dtype)) or a
    :attr:`~fuzzdist.problems.Kind.MISMATCH` one (how many elements differ, the first's index and values)."""
    layout = layout_problem(what, actual, expected)
    if layout is not None:
        return layout
    if bitwise_equal(actual, expected):  # the fast path: a C comparison, no copies to bytes
        return None
    a, e = raw_bytes(actual), raw_bytes(expected)
    itemsize = max(1, len(a) // max(1, actual.numel()))
    byte = next(i for i, (x, y) in enumerate(zip(a, e, strict=False)) if x != y)
    index = byte // itemsize
    flat_a = actual.detach().to("cpu").contiguous().reshape(-1)
    flat_e = expected.detach().to("cpu").contiguous().reshape(-1)
    count = int(sum(1 for i in range(0, len(a), itemsize) if a[i : i + itemsize] != e[i : i + itemsize]))
    return Problem(
        Kind.MISMATCH,
        what,
        index=index,
        got=flat_a[index].item(),
        expected=flat_e[index].item(),
        count=count,
        size=actual.numel(),
    )


def keyed_differences(
    got: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    missing: Callable[[str], str],
    different: Callable[[str], str],
) -> list[Problem]:
    """What is wrong in ``got`` against ``expected``, key by key in ``expected``'s order: a
    :attr:`~fuzzdist.problems.Kind.MISSING` problem named ``missing(key)`` where ``got`` lacks the key, else
    the :func:`first_difference` of its tensor, named ``different(key)``.  Keys only ``got`` holds are not
    looked at."""
    problems = []
    for key, value in expected.items():
        found = got.get(key)
        problem = (
            Problem(Kind.MISSING, missing(key)) if found is None else first_difference(found, value, different(key))
        )
        if problem is not None:
            problems.append(problem)
    return problems


def storage_order(t: torch.Tensor) -> torch.Tensor | None:
    """``t``'s elements in the order its memory holds them, shaped like ``t``: what a backend that
    ignores strides (copies memory as if it were row-major) reads from ``t`` or makes of a row-major
    write into it.  None where ``t`` is not dense (gaps or overlaps): there is no such order."""
    if t.numel() and sorted(s for s, n in zip(t.stride(), t.shape, strict=True) if n > 1) != sorted(_dense_strides(t)):
        return None
    return t.as_strided((t.numel(),), (1,), t.storage_offset()).reshape(t.shape)


def _dense_strides(t: torch.Tensor) -> list[int]:
    """The strides a dense tensor of ``t``'s shape has in some dim order (ignoring size-1 dims)."""
    sizes = sorted((s, n) for s, n in zip(t.stride(), t.shape, strict=True) if n > 1)
    out, step = [], 1
    for _, n in sizes:
        out.append(step)
        step *= n
    return out


def written_ignoring_strides(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor | None:
    """What a backend that ignores strides leaves in a tensor laid out like ``like`` when it writes
    ``values`` (row-major) into its memory; None where ``like`` is not dense."""
    out = torch.empty_like(like)
    in_memory_order = storage_order(out)
    if in_memory_order is None:
        return None
    in_memory_order.copy_(values)
    return out


def mismatch(
    what: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    bad: torch.Tensor,
    bound: torch.Tensor | float | None = None,
    error: torch.Tensor | None = None,
) -> Problem | None:
    """The :class:`~fuzzdist.problems.Problem` of a comparison within a tolerance that found the elements
    ``bad`` (a bool mask shaped like ``actual``) wrong: None where none is; else how many, and the first
    one (the worst by ``error``, where given), with the tolerance ``bound`` there."""
    flat_bad = bad.reshape(-1)
    if not bool(flat_bad.any()):
        return None
    if error is None:
        i = int(flat_bad.nonzero()[0])
    else:
        i = int(torch.where(flat_bad, error.reshape(-1).nan_to_num(nan=math.inf), -1.0).argmax())
    at = None if bound is None else float(torch.as_tensor(bound, dtype=torch.float64).expand(bad.shape).reshape(-1)[i])
    return Problem(
        Kind.MISMATCH,
        what,
        index=i,
        got=actual.reshape(-1)[i].item(),
        expected=expected.reshape(-1)[i].item(),
        bound=at,
        count=int(flat_bad.sum()),
        size=actual.numel(),
        worst=error is not None,
    )


def tolerance_problem(
    what: str, actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float, *, worst: bool = False
) -> Problem | None:
    """None where ``actual`` has ``expected``'s shape and dtype and every element is within
    ``atol + rtol * |expected|`` of it (``torch.isclose``, NaN matching NaN); else the :func:`layout_problem`,
    or the :func:`mismatch` of the elements beyond, with that bound (in float64) at the element shown: the
    first one, or with ``worst`` the one farthest from its expected value."""
    layout = layout_problem(what, actual, expected)
    if layout is not None:
        return layout
    close = torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    error = (actual - expected).abs() if worst else None
    return mismatch(what, actual, expected, ~close, atol + rtol * expected.abs().double(), error)


def gradient_problem(
    what: str, actual: torch.Tensor | None, expected: tuple[torch.Tensor, torch.Tensor] | None
) -> Problem | None:
    """The :class:`~fuzzdist.problems.Problem` of a gradient against the ranks' mean: ``expected`` is
    (mean, bound) in float64, or None where no rank has a gradient.  ``actual`` None counts as zeros;
    None when it is within the bound (NaN never is), else the worst element."""
    if expected is None:
        if actual is None or not bool(actual.any()):
            return None  # no rank used the parameter: None and zeros alike
        return Problem(Kind.MISMATCH, what, detail="got a non-zero gradient where no rank has one")
    mean, bound = expected
    if actual is None:
        actual = torch.zeros_like(mean)
    if tuple(actual.shape) != tuple(mean.shape):
        return Problem(Kind.SHAPE, what, got=tuple(actual.shape), expected=tuple(mean.shape))
    error = (actual.double() - mean).abs()
    return mismatch(what, actual, mean, ~(error <= bound), bound, error)


def first_disagreement(results: Sequence[Mapping[str, Any]]) -> tuple[int, int] | None:
    """Where the ranks' ``"digests"`` lists (one per rank, in ``results``) first part from rank 0's: the
    rank, and the index of its first digest that differs (where one list merely stops early, the shorter
    length); None where every rank's equals rank 0's."""
    first = results[0]["digests"]
    for rank, obs in enumerate(results):
        mine = obs["digests"]
        if mine != first:
            return rank, next(
                (i for i, (a, b) in enumerate(zip(mine, first, strict=False)) if a != b), min(len(first), len(mine))
            )
    return None
