"""Share CUDA tensors between rank processes the way torch does, and wrap device memory for zero-copy.

``torch.multiprocessing.reductions.reduce_tensor`` turns a CUDA tensor into
``(rebuild_cuda_tensor, args)``: a CUDA IPC handle of the tensor's memory
(or, under expandable segments, a handle the receiver takes over with
``pidfd_getfd``), plus size, stride, offset and event handles.  ``args[6]``
is the device the receiver opens the memory on; as in torch's own tests, the
receiver sets it to its own device.  The reduction is small plain data, so it
travels by ordinary pickle (``dist.broadcast_object_list``), unlike a CPU
tensor, which a plain pickle copies.

Use with :func:`fuzzdist.sharing.share_tensor`::

    share_tensor(t, src, group, share=reduce_cuda_handles,
                 receive=functools.partial(open_cuda_handle, device_index=ctx.device.index))
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fuzzdist.errors import InvalidArgument

__all__ = ["CudaArrayInterface", "expandable_segments_active", "ipc_allocator_modes", "open_cuda_handle",
           "reduce_cuda_handles"]

_DEVICE_ARG = 6  # index of the device in rebuild_cuda_tensor's arguments


def reduce_cuda_handles(tensor: torch.Tensor, receivers: Sequence[int]) -> dict[int, bytes]:
    """``reduce_tensor`` of a CUDA tensor, pickled, for each receiver rank.

    One reduction serves every receiver (each process opens the IPC handle
    once; torch counts the references), but each gets its own bytes so the
    interface matches ``fuzzdist.sharing.reduce_tensor_handles``.
    """
    from torch.multiprocessing.reductions import reduce_tensor

    if not tensor.is_cuda:
        raise InvalidArgument(f"reduce_cuda_handles shares CUDA tensors; got one on {tensor.device}")
    data = pickle.dumps(reduce_tensor(tensor))
    return {int(r): data for r in receivers}


def open_cuda_handle(handle: bytes, device_index: int) -> torch.Tensor:
    """Rebuild a CUDA tensor from another process's reduction, on ``device_index``."""
    rebuild, args = pickle.loads(handle)
    args = list(args)
    args[_DEVICE_ARG] = device_index
    return rebuild(*args)


@dataclass(frozen=True)
class CudaArrayInterface:
    """An object that exposes device memory through ``__cuda_array_interface__`` (version 3).

    The seed test's ``CupyWrapper``, generalised: any shape and typestr,
    optional strides, read-only flag.  It owns nothing: keep the memory's
    owner alive while a tensor views it.
    """

    data_ptr: int
    shape: tuple[int, ...]
    typestr: str = "|u1"
    strides: tuple[int, ...] | None = None
    readonly: bool = False

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": tuple(self.shape),
            "typestr": self.typestr,
            "data": (self.data_ptr, self.readonly),
            "strides": self.strides,
            "version": 3,
        }


def expandable_segments_active(device: torch.device) -> bool:
    """Did the allocator really give ``device`` expandable segments?  Checked, not assumed.

    Reads the allocator's snapshot: each segment says whether it is
    expandable (torch >= 2.1).  False when the device has no segment yet.
    """
    index = torch.device(device).index
    if index is None:
        index = torch.cuda.current_device()
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") == index and segment.get("is_expandable"):
            return True
    return False


def ipc_allocator_modes():
    """``allocator_modes("cuda")`` less expandable segments where this machine refuses ``pidfd_getfd``.

    IPC of an expandable segment needs that syscall between the ranks; where a
    container forbids it the mode can't work, so it is left out, not failed.
    """
    from fuzzdist import strategies as fst
    from fuzzdist.capabilities import missing_pidfd_getfd

    modes = fst.allocator_modes("cuda")
    if missing_pidfd_getfd() is not None:
        modes = modes.filter(lambda mode: not mode.expandable_segments)
    return modes
