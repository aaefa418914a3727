"""The ``dtypes()`` strategy and ``supported_dtypes()``: the catalogue's dtypes that a device can hold."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from fuzzdist.errors import InvalidStrategyArgument
from fuzzdist.strategies._dtype_catalogue import DTYPE_KINDS, KindArg, _catalogue
from fuzzdist.strategies._dtype_probe import _usable_dtype_names


def _normalize_kinds(kind: KindArg) -> frozenset[str] | None:
    if kind is None:
        return None
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    if not kinds:
        raise InvalidStrategyArgument("kind must name at least one dtype kind")
    for k in kinds:
        if k not in DTYPE_KINDS:
            raise InvalidStrategyArgument(f"unknown dtype kind {k!r}; choose from {DTYPE_KINDS}")
    return frozenset(kinds)


def _normalize_device(device: str | torch.device) -> str:
    try:
        return str(torch.device(device))
    except (RuntimeError, TypeError) as exc:
        raise InvalidStrategyArgument(f"not a torch device: {device!r}") from exc


def supported_dtypes(device: str | torch.device = "cpu", kind: KindArg = None) -> tuple[torch.dtype, ...]:
    """The dtypes ``dtypes(device, kind)`` draws from, in shrink order.

    Probes the device the first time it is asked about (cached per process);
    a device that is absent or unusable yields an empty tuple.
    """
    kinds = _normalize_kinds(kind)
    usable = set(_usable_dtype_names(_normalize_device(device)))
    return tuple(dt for dt, k in _catalogue() if str(dt) in usable and (kinds is None or k in kinds))


def dtypes(device: str | torch.device = "cpu", kind: KindArg = None) -> st.SearchStrategy[torch.dtype]:
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
    ``InvalidStrategyArgument`` at draw time.
    """
    kinds = _normalize_kinds(kind)
    dev = _normalize_device(device)

    def build() -> st.SearchStrategy[torch.dtype]:
        allowed = supported_dtypes(dev, kinds)
        if not allowed:
            raise InvalidStrategyArgument(
                f"no dtype of kind {sorted(kinds) if kinds else 'any'} is usable "
                f"on device {dev!r} (is the device present?)"
            )
        return st.sampled_from(allowed)

    if torch.device(dev).type == "cpu":
        return build()  # cheap in-process probe; gives a readable repr
    return st.deferred(build)
