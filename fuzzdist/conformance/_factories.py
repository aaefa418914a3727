"""Reference factories: ProcessGroups torch ships, built the way a factory should build one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

_TIMEOUT = timedelta(minutes=5)  # the rank pool's own timeout reports hangs long before this


def gloo_backend(rank: int, world_size: int, store: Any, device: torch.device) -> Any:
    """A bare ``ProcessGroupGloo`` (a ``dist.Backend``): fuzzdist wraps it in a ProcessGroup."""
    return dist.ProcessGroupGloo(store, rank, world_size, _TIMEOUT)


def gloo(rank: int, world_size: int, store: Any, device: torch.device) -> Any:
    """gloo as ``init_process_group("gloo")`` sets it up: a ``ProcessGroup`` with a gloo backend
    registered for the CPU (and for CUDA on a GPU rank).  The default factory of the checks."""
    backend = gloo_backend(rank, world_size, store, device)
    pg = dist.ProcessGroup(store, rank, world_size)
    gloo_type = dist.ProcessGroup.BackendType.GLOO
    pg._set_default_backend(gloo_type)
    pg._register_backend(torch.device("cpu"), gloo_type, backend)
    if device.type == "cuda":
        pg._register_backend(torch.device("cuda"), gloo_type, backend)
    return pg
