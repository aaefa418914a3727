"""Every example starts clean: seed the RNGs, snapshot global state, restore it after.

Runs inside a rank process, around each call of ``fn``.  What can be put
back is put back; what can't (allocator settings that are read once) is
reported so the pool recycles the process.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Callable

import torch
import torch.multiprocessing as tmp

try:
    import numpy as _np
except ImportError:  # numpy is optional inside torch
    _np = None  # type: ignore[assignment]

# Read once by the CUDA caching allocator at start-up: changing them in an
# example can't be undone in place, so the rank process is recycled.
_UNDOABLE_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")

_get_default_device: Callable[[], torch.device] | None = getattr(torch, "get_default_device", None)


def seed_everything(seed: int, cuda: bool = False) -> None:
    """Seed random, numpy and torch (CPU, and every GPU on a CUDA rank).

    Not ``torch.manual_seed``: it also seeds every accelerator backend torch
    knows, which costs ~160us an example on a CPU rank.
    """
    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    if cuda:
        torch.cuda.manual_seed_all(seed)
    if _np is not None:
        _np.random.seed(seed % 2**32)


def _environ_snapshot() -> dict:
    # os.environ's raw dict: a plain copy costs ~1us, against ~25us for
    # os.environ.copy(), which decodes every entry.  Falls back where absent.
    raw = getattr(os.environ, "_data", None)
    return raw.copy() if isinstance(raw, dict) else dict(os.environ)


def _decode(snapshot: dict) -> dict[str, str]:
    if isinstance(os.environ.get("PATH", ""), str) and snapshot and isinstance(next(iter(snapshot)), bytes):
        return {os.fsdecode(k): os.fsdecode(v) for k, v in snapshot.items()}
    return dict(snapshot)


class StateGuard:
    """Snapshot of the process-global state an example may change."""

    __slots__ = ("env", "dtype", "grad", "sharing", "threads", "deterministic", "anomaly",
                 "cwd", "default_device", "warning_filters")

    def __init__(self) -> None:
        self.env = _environ_snapshot()
        self.dtype = torch.get_default_dtype()
        self.grad = torch.is_grad_enabled()
        self.sharing = tmp.get_sharing_strategy()
        self.threads = torch.get_num_threads()
        self.deterministic = (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())
        self.anomaly = torch.is_anomaly_enabled()
        self.cwd = os.getcwd()
        self.default_device = _get_default_device() if _get_default_device else None
        self.warning_filters = list(warnings.filters)

    def restore(self) -> list[str]:
        """Put everything back; return what could not be undone (recycle the process)."""
        unrestorable: list[str] = []
        if _environ_snapshot() != self.env:
            before = _decode(self.env)
            for key in _UNDOABLE_ENV:
                if os.environ.get(key) != before.get(key):
                    unrestorable.append(f"environment variable {key} changed")
            os.environ.clear()
            os.environ.update(before)
        if torch.get_default_dtype() != self.dtype:
            torch.set_default_dtype(self.dtype)
        if torch.is_grad_enabled() != self.grad:
            torch.set_grad_enabled(self.grad)
        if tmp.get_sharing_strategy() != self.sharing:
            tmp.set_sharing_strategy(self.sharing)
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        deterministic = (torch.are_deterministic_algorithms_enabled(),
                         torch.is_deterministic_algorithms_warn_only_enabled())
        if deterministic != self.deterministic:
            torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        if torch.is_anomaly_enabled() != self.anomaly:
            torch.set_anomaly_enabled(self.anomaly)
        if os.getcwd() != self.cwd:
            os.chdir(self.cwd)
        if _get_default_device is not None and _get_default_device() != self.default_device:
            torch.set_default_device(self.default_device)
        if warnings.filters != self.warning_filters:
            warnings.filters[:] = self.warning_filters  # type: ignore[index]  # a list at run time
            mutated = getattr(warnings, "_filters_mutated", None)
            if mutated is not None:
                mutated()  # drop the per-module "already warned" caches
        return unrestorable
