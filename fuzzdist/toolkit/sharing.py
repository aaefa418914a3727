"""Share CPU tensors between rank processes the way ``torch.multiprocessing`` does.

torch shares a tensor with another process by pickling it with
``multiprocessing.reduction.ForkingPickler``, for which ``torch.multiprocessing``
registers ``reduce_tensor`` and ``reduce_storage``. Pickling moves the tensor's
storage into shared memory (in place: the tensor keeps its values, at a new
address) and writes a *handle* to that memory instead of the bytes. The handle
depends on the sharing strategy that is active when the tensor is pickled:

* ``file_descriptor`` (torch's default on Linux): a ``DupFd``. The sending
  process keeps a duplicate of the memory's fd in its
  ``multiprocessing.resource_sharer`` thread, which hands it over a Unix socket
  to the first process that opens the handle, and then forgets it. A handle
  opens only once, so each receiver needs its own. The sender holds an
  unopened handle's fd, and with it the memory, until it exits.
* ``file_system``: the name of a file in ``/dev/shm`` with a reference count
  stored in the file. Pickling adds one reference and opening the handle
  drops it, so a handle that is never opened keeps the file until
  ``torch_shm_manager`` removes it when the sender exits.

A plain ``pickle`` (which ``dist.broadcast_object_list`` uses) sends a copy of
a CPU tensor's bytes instead, so the receiver gets private memory.

This module:

* ``reduce_tensor_handles``: one handle per receiver.
* ``open_tensor_handle``: opens one handle.
* ``share_tensor``: does both over a process group and fails on every rank
  together.
* ``shared_memory_in_use`` and ``leftover_shared_memory``: list the shared
  memory a process holds, so a property can check that none outlives an
  example.

The handle functions here are for CPU tensors. ``share_tensor`` only moves
handles, so other pairs plug into it: ``fuzzdist.toolkit.cuda_ipc`` shares CUDA
tensors through it by CUDA IPC. Its agreement step all-reduces a small CPU
tensor, so the group must take CPU tensors (gloo).
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.multiprocessing

from fuzzdist.errors import InvalidArgument, InvalidType, SharingError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = [
    "ReceiveFn",
    "ShareFn",
    "SharingError",
    "leftover_shared_memory",
    "open_tensor_handle",
    "reduce_tensor_handles",
    "share_tensor",
    "shared_memory_in_use",
]

# (tensor, receiver ranks) -> {receiver rank: handle bytes}
ShareFn = Callable[[torch.Tensor, Sequence[int]], "dict[int, bytes]"]
# handle bytes -> the tensor, in this process
ReceiveFn = Callable[[bytes], torch.Tensor]

_SHM_DIR = "/dev/shm/"


def reduce_tensor_handles(tensor: torch.Tensor, receivers: Sequence[int]) -> dict[int, bytes]:
    """One ForkingPickler reduction of ``tensor`` per receiver rank, as handle bytes.

    Uses the sharing strategy that is active now
    (``torch.multiprocessing.get_sharing_strategy()``). Pickling moves
    ``tensor``'s storage into shared memory in place. Each handle must be
    opened exactly once, by ``open_tensor_handle`` in the receiving process.
    A ``file_descriptor`` handle cannot be opened twice. A handle that is
    never opened keeps the memory alive in this process.
    """
    from multiprocessing.reduction import ForkingPickler

    return {int(r): bytes(ForkingPickler.dumps(tensor)) for r in receivers}


def open_tensor_handle(handle: bytes) -> torch.Tensor:
    """Rebuild a tensor from a handle made by ``reduce_tensor_handles`` in another process.

    The result views the sender's shared memory with the sender's size,
    stride, storage offset and dtype, so writes on either side are visible on
    both.
    """
    tensor = pickle.loads(handle)
    if not isinstance(tensor, torch.Tensor):
        raise InvalidType(f"the handle held a {type(tensor).__name__}, not a tensor")
    return tensor


def share_tensor(
    tensor: torch.Tensor | None,
    src: int,
    group: ProcessGroup | None = None,
    *,
    share: ShareFn = reduce_tensor_handles,
    receive: ReceiveFn = open_tensor_handle,
) -> torch.Tensor:
    """A collective: rank ``src`` shares ``tensor`` with every other rank of ``group``.

    Every rank of ``group`` must call it. On ``src``, ``tensor`` is the
    tensor to share, and it is returned as is (its storage is now in shared
    memory). The other ranks pass ``None`` and get a tensor over the same
    memory. Handles travel by ``dist.broadcast_object_list``, already
    reduced, so the broadcast never copies the tensor. ``share`` and
    ``receive`` are the two halves of the operation. Tests swap them to plant
    bugs.

    If ``share`` fails on ``src`` or ``receive`` fails on any rank, every
    rank raises ``SharingError``. The failing rank chains its own exception,
    so no rank is left waiting in the caller's next collective. With the
    default pair, the sharing strategy that is active on ``src`` applies.
    Ranks are ranks of ``group``, which must take CPU tensors (gloo).
    """
    import torch.distributed as dist

    rank = dist.get_rank(group)
    world_size = dist.get_world_size(group)
    error: BaseException | None = None
    if rank == src:
        if tensor is None:
            raise InvalidArgument("the source rank must pass the tensor to share")
        try:
            message: object = share(tensor, [r for r in range(world_size) if r != src])
        except Exception as exc:  # noqa: BLE001 - reported on every rank below
            error = exc
            message = f"{type(exc).__name__}: {exc}"
    else:
        message = None
    box = [message]
    dist.broadcast_object_list(box, src=_global_rank(group, src), group=group)
    message = box[0]
    result: torch.Tensor | None = tensor if rank == src else None
    if isinstance(message, str):  # the source failed: every rank knows, no need to agree
        if rank == src:
            raise SharingError(f"rank {src} could not share its tensor: {message}") from error
        raise SharingError(f"rank {src} could not share its tensor: {message}")
    if rank != src:
        try:
            handle = message[rank]  # type: ignore[index]
            result = receive(handle)
        except Exception as exc:  # noqa: BLE001
            error = exc
    # Agree on success: one flag per rank, so a rank that could not open its handle
    # fails together with the others instead of leaving them in a later collective.
    # (A CPU tensor: the group is a CPU (gloo) group, like the tensors it shares.)
    flags = torch.zeros(world_size, dtype=torch.int32)
    flags[rank] = 1 if error is not None else 0
    dist.all_reduce(flags, group=group)
    failed = [r for r in range(world_size) if flags[r]]
    if failed:
        detail = f": {type(error).__name__}: {error}" if error is not None else ""
        raise SharingError(f"ranks {failed} could not open the handle rank {src} sent{detail}") from error
    if result is None:  # a receiver that returned None instead of raising
        raise SharingError(f"rank {rank} got no tensor from the handle rank {src} sent")
    return result


def shared_memory_in_use() -> frozenset[str]:
    """The POSIX shared-memory segments this process holds, as paths under ``/dev/shm``.

    That is every segment it maps (``/proc/self/maps``), every one it holds
    an fd to (``/proc/self/fd``), and every ``torch_<pid>_*`` file it created
    that is still in ``/dev/shm``. Take it before and after an example and
    compare: a segment held after every rank has dropped its tensors is a
    leak. Linux only. Elsewhere it returns an empty set.
    """
    mapped, by_fd = _segments()
    return frozenset(mapped | by_fd)


def leftover_shared_memory(
    baseline: frozenset[str], wait_s: float = 1.0, mapped_wait_s: float = 0.25
) -> frozenset[str]:
    """The segments this process holds beyond ``baseline`` (a ``shared_memory_in_use()`` from before).

    Returns them, or an empty set if nothing leaked. A segment this process
    holds only through an fd gets up to ``wait_s`` seconds to go: with
    ``file_descriptor``, the sender's resource_sharer thread closes its copy
    of an fd just after passing it on, which can be a moment after the
    receiver already has it. A segment it maps or owns as a file gets
    ``mapped_wait_s``: another thread may hold the example's frames for a
    moment (the pool reads a running example's stack to explain hangs), and
    a frame held when its function returns keeps that function's tensors
    alive until it is let go. A leak lasts; either wait only lets a moment
    pass.
    """
    start = time.monotonic()
    while True:
        mapped, by_fd = _segments()
        left = (mapped | by_fd) - baseline
        waited = time.monotonic() - start
        if not left or waited >= wait_s or (mapped - baseline and waited >= mapped_wait_s):
            return frozenset(left)
        time.sleep(0.005)


def _segments() -> tuple[set[str], set[str]]:
    """(segments mapped or owned as a torch_<pid>_* file, segments held through an fd)."""
    mapped: set[str] = set()
    by_fd: set[str] = set()
    if not os.path.isdir("/proc/self/fd"):
        return mapped, by_fd
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                start = line.find(_SHM_DIR)
                if start >= 0:
                    mapped.add(line[start:].rstrip("\n").removesuffix(" (deleted)"))
    except OSError:
        pass
    prefix = f"torch_{os.getpid()}_"
    try:
        mapped.update(_SHM_DIR + name for name in os.listdir(_SHM_DIR) if name.startswith(prefix))
    except OSError:
        pass
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listdir fd itself, a racing thread)
            continue
        if target.startswith(_SHM_DIR):
            by_fd.add(target.removesuffix(" (deleted)"))
    return mapped, by_fd


def _global_rank(group: ProcessGroup | None, group_rank: int) -> int:
    import torch.distributed as dist

    if group is None or group is dist.group.WORLD:
        return group_rank
    return dist.get_global_rank(group, group_rank)
