"""Helpers properties use to compare what a rank saw with what it should have seen.

Comparisons are bitwise: NaN equals NaN with the same payload, -0.0 differs
from 0.0.  Expected values are always computed independently of the
operation under test (from the drawn spec and seed), never from its output.
"""

from __future__ import annotations

import hashlib

import torch


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
    return (tuple(actual.shape) == tuple(expected.shape) and actual.dtype == expected.dtype
            and torch.equal(_byte_view(actual), _byte_view(expected)))


def raw_bytes(t: torch.Tensor) -> bytes:
    """The tensor's values as bytes, in logical (row-major) order, whatever its layout or device."""
    return _byte_view(t).numpy().tobytes()


def fingerprint(t: torch.Tensor) -> tuple[object, ...]:
    """(shape, dtype, digest of the values): equal iff the tensors are bitwise equal."""
    return (tuple(t.shape), str(t.dtype), hashlib.blake2b(raw_bytes(t), digest_size=16).hexdigest())


def first_difference(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """None if bitwise equal, else a one-line description of the first difference."""
    if tuple(actual.shape) != tuple(expected.shape) or actual.dtype != expected.dtype:
        return (f"got shape {tuple(actual.shape)} {actual.dtype}, "
                f"expected {tuple(expected.shape)} {expected.dtype}")
    if bitwise_equal(actual, expected):  # the fast path: a C comparison, no copies to bytes
        return None
    a, e = raw_bytes(actual), raw_bytes(expected)
    itemsize = max(1, len(a) // max(1, actual.numel()))
    byte = next(i for i, (x, y) in enumerate(zip(a, e, strict=False)) if x != y)
    index = byte // itemsize
    flat_a = actual.detach().to("cpu").contiguous().reshape(-1)
    flat_e = expected.detach().to("cpu").contiguous().reshape(-1)
    count = int(sum(1 for i in range(0, len(a), itemsize) if a[i:i + itemsize] != e[i:i + itemsize]))
    return (f"{count} of {actual.numel()} elements differ; first at flat index {index}: "
            f"got {flat_a[index].item()!r}, expected {flat_e[index].item()!r}")


def storage_order(t: torch.Tensor) -> torch.Tensor | None:
    """``t``'s elements in the order its memory holds them, shaped like ``t``: what a backend that
    ignores strides (copies memory as if it were row-major) reads from ``t`` or makes of a row-major
    write into it.  None where ``t`` is not dense (gaps or overlaps): there is no such order."""
    if t.numel() and sorted(s for s, n in zip(t.stride(), t.shape, strict=True) if n > 1) != sorted(
            _dense_strides(t)):
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
