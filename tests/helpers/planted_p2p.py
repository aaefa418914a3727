"""Planted bugs for the subgroup, point-to-point and object-collective properties: stand-ins for torch's
functions, each wrong only for some inputs and entering the same communication as the real one."""

from __future__ import annotations

import torch
import torch.distributed as dist


def new_group_always_sorted(ranks, **kwargs):
    """A new_group that ignores ``sort_ranks=False``: group ranks always in ascending order."""
    kwargs.pop("sort_ranks", None)
    return dist.new_group(ranks, **kwargs)


def isend_ignoring_tag(tensor, dst, group=None, tag=0):
    """An isend that sends every message with tag 0."""
    return dist.isend(tensor, dst, group=group, tag=0)


def irecv_ignoring_tag(tensor, src, group=None, tag=0):
    """An irecv that receives every message with tag 0 (first in, first out)."""
    return dist.irecv(tensor, src, group=group, tag=0)


def _wrap_ints(obj):
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return (obj + 2**63) % 2**64 - 2**63
    if isinstance(obj, list):
        return [_wrap_ints(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_wrap_ints(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _wrap_ints(v) for k, v in obj.items()}
    return obj


def broadcast_object_list_int64(object_list, src=None, group=None, **kwargs):
    """A broadcast_object_list whose receivers get ints wrapped to 64 bits."""
    dist.broadcast_object_list(object_list, src=src, group=group, **kwargs)
    if dist.get_rank() != src:
        object_list[:] = _wrap_ints(object_list)


class _Done:
    """A Work that is complete once ``wait`` ran ``on_wait`` (a receive's copy), if any."""

    def __init__(self, on_wait=None):
        self._on_wait = on_wait

    def wait(self, timeout=None):
        if self._on_wait is not None:
            self._on_wait()
            self._on_wait = None
        return True

    def is_completed(self):
        return self._on_wait is None


_MAILBOX: dict = {}  # tag -> the tensors this rank sent itself, first in, first out


def isend_to_self(tensor, dst, group=None, tag=0):
    """An isend that delivers a self-loop, as torch documents ("isend allows src == dst rank"); torch's
    own isend to the other ranks."""
    if dst != dist.get_rank():
        return dist.isend(tensor, dst, group=group, tag=tag)
    _MAILBOX.setdefault(tag, []).append(tensor.clone())
    return _Done()


def _receive_from_self(tensor, tag, corrupt):
    def deliver():
        tensor.copy_(corrupt(_MAILBOX[tag].pop(0)))

    return _Done(deliver)


def irecv_from_self(tensor, src, group=None, tag=0):
    """The irecv that goes with ``isend_to_self``: a self-loop gets what the rank sent itself."""
    if src != dist.get_rank():
        return dist.irecv(tensor, src, group=group, tag=tag)
    return _receive_from_self(tensor, tag, lambda t: t)


def _flip_a_bit(t):
    out = t.clone()
    if out.numel():
        out.view(-1).view(torch.uint8)[0] ^= 1  # self-loops tried whole are contiguous
    return out


def irecv_from_self_flipping_a_bit(tensor, src, group=None, tag=0):
    """Like ``irecv_from_self``, but a self-loop's receiver gets the first byte with its low bit flipped."""
    if src != dist.get_rank():
        return dist.irecv(tensor, src, group=group, tag=tag)
    return _receive_from_self(tensor, tag, _flip_a_bit)


def irecv_accepting_any_layout(tensor, src, group=None, tag=0):
    """An irecv that accepts a non-contiguous tensor (which must be refused): it posts a real receive
    into a contiguous buffer, left pending when the property doesn't wait on it."""
    return dist.irecv(torch.empty(tensor.shape, dtype=tensor.dtype), src, group=group, tag=tag)


def all_reduce_adding_one(tensor, op=None, group=None, **kwargs):
    """An all_reduce whose result is one too big everywhere (any order of the ranks gives the same)."""
    work = dist.all_reduce(tensor, op=op, group=group, **kwargs)
    tensor.add_(1)
    return work


def pid(ctx):
    """The rank process's pid (to see whether the pool replaced it)."""
    import os

    return os.getpid()


def irecv_from_self_writing_nothing(tensor, src, group=None, tag=0):
    """Like ``irecv_from_self``, but a self-loop's receive completes without writing into its buffer."""
    if src != dist.get_rank():
        return dist.irecv(tensor, src, group=group, tag=tag)
    return _Done(lambda: _MAILBOX[tag].pop(0))
