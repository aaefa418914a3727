"""Planted bugs: faulty stand-ins for torch.distributed operations, each wrong only for some inputs."""

from __future__ import annotations

import torch
import torch.distributed as dist

from fuzzdist.properties.block_stream import BlockWork


def broadcast_corrupting_large(tensor, src, group=None):
    """A broadcast that flips one byte of the last element on receivers, for 3 or more elements."""
    dist.broadcast(tensor, src, group=group)
    if dist.get_rank(group) != src and tensor.numel() >= 3:
        flat = tensor.reshape(-1)
        last = flat[-1:].clone()
        if last.is_complex():
            last = torch.view_as_real(last)
        last.view(torch.uint8)[..., 0] ^= 1
        flat[-1:] = torch.view_as_complex(last) if flat.is_complex() else last


def broadcast_from_rank_0(tensor, src, group=None):
    """A broadcast that ignores its source and always sends rank 0's tensor."""
    dist.broadcast(tensor, 0, group=group)


def broadcast_dropping_doubles(tensor, src, group=None):
    """A broadcast that leaves float64 receivers untouched (silently drops the dtype)."""
    if tensor.dtype == torch.float64:
        dist.barrier(group=group)
        return
    dist.broadcast(tensor, src, group=group)


def early_release_work(index: int):
    """A Work whose block is released at creation for index 0: 'a Work that unblocks early'."""
    work = BlockWork()
    if index == 0:
        work.future_.set_result(None)
    return work


class _NonBlockingWork(BlockWork):
    def block_current_stream(self) -> None:
        """The bug: blocks nothing."""


def only_first_work_blocks(index: int):
    """'Only the first Work blocks the stream': from the second on, block_current_stream() does nothing."""
    return BlockWork() if index == 0 else _NonBlockingWork()


def open_cuda_handle_as_copy(handle, device_index):
    """'A copy instead of IPC': the receiver opens the shared memory, then keeps a private clone."""
    from fuzzdist.toolkit.cuda_ipc import open_cuda_handle

    return open_cuda_handle(handle, device_index).clone()


def as_tensor_copying(obj, device):
    """A zero-copy path that copies: ``as_tensor`` followed by a clone."""
    return torch.as_tensor(obj, device=device).clone()
