"""A pool's arguments, checked before any rank is started, and how many ranks this machine's memory holds."""

from __future__ import annotations

import os

from fuzzdist.errors import CapabilityError, InvalidArgument
from fuzzdist.pool.capabilities.backends import missing_backend, missing_distributed
from fuzzdist.pool.capabilities.gpu import missing_gpus

DEVICES = ("cpu", "cuda")

RANK_MEMORY_BYTES = 250 * 2**20  # about what one rank process holds: torch, hypothesis and fuzzdist loaded
# (227 MiB measured on torch 2.13, CPU, before its first example)


def validate_pool_args(
    world_size: object, backend: object, device: object, timeout: object, local: bool = True
) -> None:
    """Raise InvalidArgument (a ValueError)/CapabilityError for arguments no pool could run with.

    ``local``: the ranks are to be started on this machine (a RankPool), so their number is bounded by
    what it holds (:func:`too_many_ranks`); False under torchrun, whose processes exist already.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InvalidArgument(f"world_size must be a positive int (the number of ranks), got {world_size!r}")
    if local and (reason := too_many_ranks(world_size)):
        raise InvalidArgument(f"world_size={world_size}: {reason}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise InvalidArgument(f"timeout must be a positive number of seconds, got {timeout!r}")
    if device not in DEVICES:
        raise InvalidArgument(f"unknown device {device!r}: use one of {', '.join(map(repr, DEVICES))}")
    if not isinstance(backend, str):
        raise InvalidArgument(f"backend must be a string such as 'gloo' or 'nccl', got {backend!r}")
    reason = missing_distributed()
    if reason:
        raise CapabilityError(reason)
    reason = missing_backend(backend)
    if reason:
        raise InvalidArgument(reason)
    if backend == "nccl" and device != "cuda":
        raise InvalidArgument(
            "backend 'nccl' runs collectives on CUDA tensors only: pass device='cuda', "
            "or use backend='gloo' for CPU ranks"
        )
    if device == "cuda":
        reason = missing_gpus(1)
        if reason:
            raise CapabilityError(f"device='cuda' {reason}; use device='cpu'")
        if backend == "nccl":
            reason = missing_gpus(world_size)
            if reason:
                raise CapabilityError(
                    f"backend 'nccl' needs one GPU per rank: world_size={world_size} but {reason}. "
                    "Use backend='gloo' to run several ranks on one GPU, or lower the world size."
                )


def too_many_ranks(world_size: int) -> str | None:
    """Why this machine can't hold ``world_size`` rank processes at once (a sentence saying how many it
    can), or None.  Counted from the machine's memory, at :data:`RANK_MEMORY_BYTES` a rank, the driver
    as one more: past it the machine swaps or its out-of-memory killer takes the driver (a thousand
    ranks once started 140 processes before that).  The whole memory, not what is free now, so that
    the bound is the machine's and the same on every run."""
    memory = _machine_memory()
    if memory is None:
        return None
    most = max(1, memory // RANK_MEMORY_BYTES - 1)
    if world_size <= most:
        return None
    return (
        f"this machine can hold about {most} rank processes ({memory / 2**30:.1f} GiB of memory, "
        f"about {RANK_MEMORY_BYTES // 2**20} MiB a rank): pass at most {most}, or spread the ranks "
        "over several machines with torchrun"
    )


def _machine_memory() -> int | None:
    """Bytes of memory this machine has, or None where unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
