"""Planted bugs for the subgroup, point-to-point and object-collective properties: stand-ins for torch's
functions, each wrong only for some inputs and entering the same communication as the real one."""

from __future__ import annotations

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
