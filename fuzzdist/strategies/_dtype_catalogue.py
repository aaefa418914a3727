"""Every dtype fuzzdist knows about, in shrink order, and which kind each is.

A leaf: the probe (``_dtype_probe``), ``TensorSpec`` (``_tensors``) and the
``dtypes()`` strategy (``_dtypes``) all build on it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from fuzzdist.errors import InvalidArgument

# Every dtype fuzzdist knows about, by torch attribute name, in shrink order:
# float32 first (the minimal dtype), then the other common ones, then the
# exotic ones. Names the installed torch lacks are skipped (getattr), never
# assumed. complex32, the sub-byte uint1..uint7 and the packed float4 types are
# deliberately absent: torch can barely create them, let alone communicate them.
_CATALOGUE: tuple[tuple[str, str], ...] = (
    ("float32", "float"),
    ("float64", "float"),
    ("float16", "float"),
    ("bfloat16", "float"),
    ("complex64", "complex"),
    ("complex128", "complex"),
    ("int64", "int"),
    ("int32", "int"),
    ("int16", "int"),
    ("int8", "int"),
    ("uint8", "unsigned"),
    ("bool", "bool"),
    ("uint16", "unsigned"),
    ("uint32", "unsigned"),
    ("uint64", "unsigned"),
    ("float8_e4m3fn", "float8"),
    ("float8_e5m2", "float8"),
    ("float8_e4m3fnuz", "float8"),
    ("float8_e5m2fnuz", "float8"),
    ("float8_e8m0fnu", "float8"),
)

DTYPE_KINDS: tuple[str, ...] = ("float", "complex", "int", "unsigned", "bool", "float8")

KindArg = str | Iterable[str] | None


def _catalogue() -> list[tuple[torch.dtype, str]]:
    out = []
    for name, kind in _CATALOGUE:
        dtype = getattr(torch, name, None)
        if isinstance(dtype, torch.dtype):
            out.append((dtype, kind))
    return out


def _kind_of(dtype: torch.dtype) -> str:
    for candidate, kind in _catalogue():
        if candidate == dtype:
            return kind
    raise InvalidArgument(f"fuzzdist does not generate {dtype}")
