"""Which dtypes a device can actually hold: probed once per device and process.

CPU is probed in process; any other device in a fresh interpreter
(:mod:`fuzzdist.strategies._dtype_probe_child`, through
:mod:`fuzzdist.fresh_interpreter`), so the driver never starts a CUDA context.
"""

from __future__ import annotations

import functools

import torch

from fuzzdist import fresh_interpreter
from fuzzdist.strategies._dtype_catalogue import _catalogue
from fuzzdist.strategies._tensors import PATTERNS, TensorSpec

CHILD_MODULE = "fuzzdist.strategies._dtype_probe_child"
CHILD_TIMEOUT = 300  # seconds: the child imports torch and may start a device's runtime


def _probe_one(dtype: torch.dtype, device: str) -> bool:
    """Whether ``dtype`` is usable on ``device``: it can be created, filled,
    compared, copied there from CPU bytes, and ``TensorSpec.materialize``
    builds every value pattern of it without raising."""
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


def probe_here(device: str) -> list[str]:
    """The names (``str(dtype)``) of the catalogue's dtypes usable on ``device``, probed in this process."""
    return [str(dt) for dt, _ in _catalogue() if _probe_one(dt, device)]


def _device_runtime_initialized(device: str) -> bool:
    """Whether this process already started ``device``'s runtime (probing it here then costs nothing new)."""
    dev_type = torch.device(device).type
    module = getattr(torch, dev_type, None)
    is_initialized = getattr(module, "is_initialized", None)
    try:
        return bool(is_initialized()) if callable(is_initialized) else False
    except Exception:  # noqa: BLE001
        return False


@functools.cache
def _usable_dtype_names(device: str) -> tuple[str, ...]:
    """The names of the dtypes usable on ``device`` (empty where the probe had no answer), kept per process."""
    # CPU (and any device whose runtime this process already started) is
    # probed in-process. Anything else is probed in a fresh interpreter:
    # Hypothesis strategies run in the driver, and starting a CUDA context
    # there would pin memory on the GPU and break fork()ed workers.
    if torch.device(device).type in ("cpu", "meta") or _device_runtime_initialized(device):
        return tuple(probe_here(device))
    answer = fresh_interpreter.ask(CHILD_MODULE, device, timeout=CHILD_TIMEOUT)
    if not answer.given or not isinstance(answer.value, list):
        return ()  # no answer: the device holds nothing fuzzdist can use
    return tuple(str(name) for name in answer.value)
