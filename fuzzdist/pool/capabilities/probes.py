"""The capabilities tests name (the ``needs`` marker, ``missing(...)``): each name and its probe.

The `needs` marker (see ``fuzzdist/driver/plugin.py``) turns a missing one into a skip reason before
any rank runs.
"""

from __future__ import annotations

from collections.abc import Callable

from fuzzdist.errors import InvalidArgument
from fuzzdist.pool.capabilities.gpu import (
    missing_cupy,
    missing_expandable_segments,
    missing_gpus,
    missing_pidfd_getfd,
)
from fuzzdist.pool.capabilities.torch_features import (
    missing_block_current_stream,
    missing_distributed_nn,
    missing_fully_shard,
    missing_functional_collectives,
)

PROBES: dict[str, Callable[[], str | None]] = {
    "cuda": lambda: missing_gpus(1),
    "pidfd_getfd": missing_pidfd_getfd,
    "cupy": missing_cupy,
    "block_current_stream": missing_block_current_stream,
    "expandable_segments": missing_expandable_segments,
    "fully_shard": missing_fully_shard,
    "functional_collectives": missing_functional_collectives,
    "distributed_nn": missing_distributed_nn,
}


def missing(*names: str) -> str | None:
    """The first reason any of the named capabilities is missing, or None.  See PROBES."""
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        raise InvalidArgument(f"unknown capabilities {unknown}; known: {', '.join(PROBES)}")
    for name in names:
        reason = PROBES[name]()
        if reason:
            return reason
    return None
