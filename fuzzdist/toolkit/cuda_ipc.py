"""Share CUDA tensors between rank processes the way torch does, and wrap device memory for zero-copy.

``torch.multiprocessing.reductions.reduce_tensor`` turns a CUDA tensor into
``(rebuild_cuda_tensor, args)``: a CUDA IPC handle of the tensor's memory
(or, under expandable segments, a handle the receiver takes over with
``pidfd_getfd``), plus size, stride, offset and event handles.  ``args[6]``
is the device the receiver opens the memory on; as in torch's own tests, the
receiver sets it to its own device.  The reduction is small plain data, so it
travels by ordinary pickle (``dist.broadcast_object_list``), unlike a CPU
tensor, which a plain pickle copies.

Use with :func:`fuzzdist.toolkit.sharing.share_tensor`::

    share_tensor(t, src, group, share=reduce_cuda_handles,
                 receive=functools.partial(open_cuda_handle, device_index=ctx.device.index))
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.strategies import inherited_allocator_settings

__all__ = [
    "CudaArrayInterface",
    "check_expandable_segment",
    "expandable_segment_mismatch",
    "expandable_segments_active",
    "ipc_allocator_modes",
    "open_cuda_handle",
    "reduce_cuda_handles",
    "segment_of",
]

_DEVICE_ARG = 6  # index of the device in rebuild_cuda_tensor's arguments


def reduce_cuda_handles(tensor: torch.Tensor, receivers: Sequence[int]) -> dict[int, bytes]:
    """One ``reduce_tensor`` of a CUDA tensor per receiver rank, pickled.

    Each reduction is its own: ``_share_cuda_`` gives it a fresh reference
    counter set to 1, and the receiver that rebuilds it lets go of that
    counter exactly once.  One reduction sent to several receivers would be
    released once per receiver (down to -2 with three), and the source could
    free and reuse the block while others still map it, a use-after-free of
    fuzzdist's making.  (``fuzzdist.toolkit.sharing.reduce_tensor_handles`` makes one
    handle per receiver on CPU for the same reason.)
    """
    from torch.multiprocessing import reductions

    if not tensor.is_cuda:
        raise InvalidArgument(f"reduce_cuda_handles shares CUDA tensors; got one on {tensor.device}")
    return {int(r): pickle.dumps(reductions.reduce_tensor(tensor)) for r in receivers}


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


def segment_of(pointer: int, snapshot: Iterable[Mapping[str, Any]], device_index: int) -> Mapping[str, Any] | None:
    """The segment of ``snapshot`` (``torch.cuda.memory_snapshot()``) on ``device_index`` that holds
    ``pointer`` (``address <= pointer < address + total_size``), or None."""
    for segment in snapshot:
        if segment.get("device") != device_index:
            continue
        address, size = segment.get("address"), segment.get("total_size")
        if address is not None and size is not None and address <= pointer < address + size:
            return segment
    return None


def expandable_segment_mismatch(
    pointer: int, expected: bool, snapshot: Iterable[Mapping[str, Any]], device_index: int
) -> str | None:
    """None if the segment holding ``pointer`` is expandable exactly when ``expected`` says so, else why not.

    Asks about the tensor's own segment, not about any segment of the device:
    the caching allocator reuses free blocks of segments made under an earlier
    setting, so "some segment is expandable" says nothing about this tensor.
    """
    segment = segment_of(pointer, snapshot, device_index)
    if segment is None:
        return f"no segment of cuda:{device_index} in the allocator's snapshot holds {pointer:#x}"
    if "is_expandable" not in segment:
        return f"torch {torch.__version__}'s memory snapshot does not say whether a segment is expandable"
    actual = bool(segment["is_expandable"])
    if actual == expected:
        return None
    wanted = "an expandable segment" if expected else "a non-expandable segment"
    return (
        f"expected {wanted}, but the tensor at {pointer:#x} lies in a segment with is_expandable={actual} "
        f"(address {segment['address']:#x}, {segment['total_size']} bytes)"
    )


def check_expandable_segment(tensor: torch.Tensor, expected: bool) -> str | None:
    """``expandable_segment_mismatch`` for ``tensor``'s memory, from the allocator's snapshot now."""
    return expandable_segment_mismatch(
        tensor.data_ptr(),
        expected,
        torch.cuda.memory_snapshot(),
        tensor.device.index if tensor.device.index is not None else torch.cuda.current_device(),
    )


def expandable_segments_active(device: torch.device) -> bool:
    """Does any segment of ``device`` say it is expandable?  (A device-wide hint only: a given
    tensor can still sit in an older, non-expandable segment; see :func:`check_expandable_segment`.)"""
    index = torch.device(device).index
    if index is None:
        index = torch.cuda.current_device()
    return any(
        segment.get("device") == index and segment.get("is_expandable") for segment in torch.cuda.memory_snapshot()
    )


def ipc_allocator_modes() -> st.SearchStrategy[fst.CudaAllocatorMode]:
    """``allocator_modes("cuda")`` less the modes that would use expandable segments where this machine
    refuses ``pidfd_getfd``.

    IPC of an expandable segment needs that syscall between the ranks; where a
    container forbids it the mode can't work, so it is left out, not failed.
    The filter is on the *effective* setting: a mode that leaves
    ``expandable_segments`` unset inherits ``PYTORCH_CUDA_ALLOC_CONF`` (or
    ``PYTORCH_ALLOC_CONF``), which may turn them on.
    """
    from fuzzdist.pool.capabilities.gpu import missing_pidfd_getfd

    modes = cast("st.SearchStrategy[fst.CudaAllocatorMode]", fst.allocator_modes("cuda"))
    if missing_pidfd_getfd() is not None:
        inherited = inherited_allocator_settings()

        def without_expandable(mode: fst.CudaAllocatorMode) -> bool:
            return not mode.effective_expandable_segments(inherited)

        modes = modes.filter(without_expandable)
    return modes
