"""Planted bugs for the shared-tensor and zero-copy properties: faulty stand-ins for sharing and for
interface conversions, each wrong only for some inputs.

Sharing stand-ins have ``fuzzdist.toolkit.sharing``'s signatures: a sharer maps (tensor, receiver ranks) to
{rank: handle bytes}, and a receiver maps handle bytes to a tensor. Conversions map a tensor to a
tensor taken over its memory.
"""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import torch

from fuzzdist.toolkit.sharing import open_tensor_handle, reduce_tensor_handles

# ---------------------------------------------------------------------------
# sharing


def share_pickling_large(tensor, receivers):
    """Shares tensors of up to 4 elements. Larger ones go by plain pickle, which is how
    ``dist.broadcast_object_list`` sends a CPU tensor: as a copy of its bytes."""
    if tensor.numel() <= 4:
        return reduce_tensor_handles(tensor, receivers)
    return {r: pickle.dumps(tensor) for r in receivers}


def share_one_handle(tensor, receivers):
    """Reduces the tensor once and sends that one handle to every receiver. A file_descriptor
    handle opens only once, so with two or more receivers all but one fail."""
    handle = bytes(ForkingPickler.dumps(tensor))
    return {r: handle for r in receivers}


def receive_contiguous(handle):
    """Opens the handle, then calls ``.contiguous()``: a transposed or channels_last tensor becomes
    a private copy, so this rank's writes land only in its own memory."""
    return open_tensor_handle(handle).contiguous()


_KEPT: list = []


def receive_and_keep(handle):
    """Opens the handle and keeps the tensor in a module-level cache that nobody clears, so its
    shared memory outlives the example."""
    tensor = open_tensor_handle(handle)
    _KEPT[:] = [tensor]
    return tensor


def forget_kept(ctx):
    """A rank function that drops what ``receive_and_keep`` kept."""
    _KEPT.clear()


# ---------------------------------------------------------------------------
# interface conversions


def _typestr(dtype: torch.dtype) -> str:
    return torch.empty(0, dtype=dtype).numpy().dtype.str


class _ArrayInterface:
    def __init__(self, tensor, address):
        self._tensor = tensor
        self.__array_interface__ = {
            "shape": tuple(tensor.shape),
            "typestr": _typestr(tensor.dtype),
            "data": (address, False),
            "strides": tuple(s * tensor.element_size() for s in tensor.stride()),
            "version": 3,
        }


def as_tensor_copying_float64(tensor):
    """``torch.as_tensor(np.asarray(__array_interface__))``, except that float64 arrays go through
    ``np.array``, which copies by default."""
    array = np.asarray(_ArrayInterface(tensor, tensor.data_ptr()))
    if array.dtype == np.float64:
        array = np.array(array)
    return torch.as_tensor(array)


def as_tensor_ignoring_storage_offset(tensor):
    """``torch.as_tensor`` over an ``__array_interface__`` that points at the start of the
    tensor's storage (``untyped_storage().data_ptr()``) instead of its first element. It is right
    only when the storage offset is 0."""
    return torch.as_tensor(np.asarray(_ArrayInterface(tensor, tensor.untyped_storage().data_ptr())))
