"""Which dtypes exist in the installed torch, which kind each is, and which of
them a device can actually hold; plus the ``dtypes()`` strategy."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterable

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

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
    raise ValueError(f"fuzzdist does not generate {dtype}")


def _normalize_kinds(kind: KindArg) -> frozenset[str] | None:
    if kind is None:
        return None
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    if not kinds:
        raise InvalidArgument("kind must name at least one dtype kind")
    for k in kinds:
        if k not in DTYPE_KINDS:
            raise InvalidArgument(
                f"unknown dtype kind {k!r}; choose from {DTYPE_KINDS}"
            )
    return frozenset(kinds)


def _normalize_device(device: str | torch.device) -> str:
    try:
        return str(torch.device(device))
    except (RuntimeError, TypeError) as exc:
        raise InvalidArgument(f"not a torch device: {device!r}") from exc


def _probe_one(dtype: torch.dtype, device: str) -> bool:
    """Whether ``dtype`` is usable on ``device``: it can be created, filled,
    compared, copied there from CPU bytes, and ``TensorSpec.materialize``
    builds every value pattern of it without raising."""
    from fuzzdist.strategies._tensors import PATTERNS, TensorSpec

    try:
        empty = torch.empty(8, dtype=dtype, device=device)
        empty.fill_(0)
        zeros = torch.zeros(8, dtype=dtype, device=device)
        if not bool((empty == zeros).all()):
            return False
        if not torch.equal(empty, zeros):
            return False
        for pattern in PATTERNS:
            t = TensorSpec((3, 5), dtype, "transposed", pattern).materialize(device, 1)
            if t.dtype != dtype or tuple(t.shape) != (3, 5):
                return False
            t.clone()
    except Exception:  # noqa: BLE001 - any failure means "not on this device"
        return False
    return True


def _probe(device: str) -> list[str]:
    return [str(dt) for dt, _ in _catalogue() if _probe_one(dt, device)]


_SUBPROCESS_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from fuzzdist.strategies._dtypes import _probe
print("FUZZDIST-DTYPES " + json.dumps(_probe(sys.argv[2])))
"""


def _device_runtime_initialized(device: str) -> bool:
    dev_type = torch.device(device).type
    module = getattr(torch, dev_type, None)
    is_initialized = getattr(module, "is_initialized", None)
    try:
        return bool(is_initialized()) if callable(is_initialized) else False
    except Exception:  # noqa: BLE001
        return False


@functools.cache
def _usable_dtype_names(device: str) -> tuple[str, ...]:
    # CPU (and any device whose runtime this process already started) is
    # probed in-process. Anything else is probed in a short-lived child
    # process: Hypothesis strategies run in the driver, and starting a CUDA
    # context there would pin memory on the GPU and break fork()ed workers.
    if torch.device(device).type in ("cpu", "meta") or _device_runtime_initialized(device):
        return tuple(_probe(device))
    package_parent = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS_PROBE, package_parent, device],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    for line in proc.stdout.splitlines():
        if line.startswith("FUZZDIST-DTYPES "):
            return tuple(json.loads(line[len("FUZZDIST-DTYPES "):]))
    return ()


def supported_dtypes(
    device: str | torch.device = "cpu", kind: KindArg = None
) -> tuple[torch.dtype, ...]:
    """The dtypes ``dtypes(device, kind)`` draws from, in shrink order.

    Probes the device the first time it is asked about (cached per process);
    a device that is absent or unusable yields an empty tuple.
    """
    kinds = _normalize_kinds(kind)
    usable = set(_usable_dtype_names(_normalize_device(device)))
    return tuple(
        dt
        for dt, k in _catalogue()
        if str(dt) in usable and (kinds is None or k in kinds)
    )


def dtypes(
    device: str | torch.device = "cpu", kind: KindArg = None
) -> st.SearchStrategy[torch.dtype]:
    """Every ``torch.dtype`` the installed torch can hold on ``device``.

    Covers float16, bfloat16, float32, float64, complex64, complex128, int8 to
    int64, uint8, the wider unsigned types (uint16/32/64), bool and the float8
    types, each only where the installed torch defines it (feature-detected)
    and where a probe shows it can be created, filled, compared and
    materialized (every ``TensorSpec`` pattern) on ``device``. Dtypes a device
    can't hold are left out, never generated and skipped.

    ``kind`` restricts the choice to one kind or a collection of kinds:
    ``"float"`` (float16/bfloat16/float32/float64), ``"float8"``,
    ``"complex"``, ``"int"`` (signed), ``"unsigned"`` and ``"bool"``.

    Values are plain ``torch.dtype`` objects (picklable). Shrinks towards
    ``torch.float32``; with a ``kind`` that excludes it, towards the first of
    float64, complex64, int64, uint8, bool, float8_e4m3fn that is allowed.

    The device is probed lazily, on the first draw, in the driver: CPU in
    process, other devices in a child process so the driver never starts a
    CUDA context. A device with no usable dtype (absent GPU) raises
    ``InvalidArgument`` at draw time.
    """
    kinds = _normalize_kinds(kind)
    dev = _normalize_device(device)

    def build() -> st.SearchStrategy[torch.dtype]:
        allowed = supported_dtypes(dev, kinds)
        if not allowed:
            raise InvalidArgument(
                f"no dtype of kind {sorted(kinds) if kinds else 'any'} is usable "
                f"on device {dev!r} (is the device present?)"
            )
        return st.sampled_from(allowed)

    if torch.device(dev).type == "cpu":
        return build()  # cheap in-process probe; gives a readable repr
    return st.deferred(build)
