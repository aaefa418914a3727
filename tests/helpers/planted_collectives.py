"""Planted bugs for the autograd-collective and DTensor properties: faulty stand-ins for
``torch.distributed.nn`` collectives and DTensor operations, each wrong only for some inputs.

Every stand-in enters the same collectives on every rank (the condition that plants the bug is
the same everywhere), so a planted bug is a wrong value, never a hang.
"""

from __future__ import annotations

import importlib

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dnn
from torch.autograd import Function

# ---------------------------------------------------------------------------
# torch.distributed.nn collectives


def all_gather_swapping_ranks_0_and_1(tensor, group=dist.group.WORLD):
    """An all_gather that returns rank 0's and rank 1's tensors in swapped places, for 2+ elements."""
    outputs = list(dnn.all_gather(tensor, group=group))
    if tensor.numel() >= 2:
        outputs[0], outputs[1] = outputs[1], outputs[0]
    return tuple(outputs)


def all_reduce_dropping_last_rank(tensor, op=dist.ReduceOp.SUM, group=dist.group.WORLD):
    """An all_reduce in which the last rank contributes zeros, for 4+ elements."""
    if tensor.numel() >= 4 and dist.get_rank(group) == dist.get_world_size(group) - 1:
        tensor = tensor * 0  # still in the graph, so every rank runs the backward collective
    return dnn.all_reduce(tensor, op=op, group=group)


class _AllReduceForgettingGradients(Function):
    """SUM all_reduce whose backward forgets to all-reduce the gradient for 2+ dim tensors."""

    @staticmethod
    def forward(ctx, group, tensor):
        ctx.group = group
        out = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        if grad.dim() >= 2:
            return None, grad.clone()  # planted: only this rank's upstream gradient
        grad = grad.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(grad, group=ctx.group)
        return None, grad


def all_reduce_with_local_grad_for_matrices(tensor, op=dist.ReduceOp.SUM, group=dist.group.WORLD):
    """An all_reduce whose SUM gradient is wrong (this rank's upstream gradient, not the sum
    over ranks) for tensors with 2 or more dims; forward values are right."""
    if op != dist.ReduceOp.SUM:
        return dnn.all_reduce(tensor, op=op, group=group)
    return _AllReduceForgettingGradients.apply(group, tensor)


class _BroadcastKeepingGradients(Function):
    """broadcast whose backward forgets to zero the gradient on the non-source ranks."""

    @staticmethod
    def forward(ctx, src, group, tensor):
        ctx.src, ctx.group = src, group
        out = tensor.clone()
        dist.broadcast(out, src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone(memory_format=torch.contiguous_format)
        dist.reduce(grad, ctx.src, group=ctx.group)
        return None, None, grad  # planted: torch zeroes this off the source; what reduce left stays


def broadcast_with_grad_off_source(tensor, src, group=dist.group.WORLD):
    """A broadcast whose backward leaves gloo's reduce buffer (not zeros) as the non-source gradient."""
    return _BroadcastKeepingGradients.apply(src, group, tensor)


# ---------------------------------------------------------------------------
# DTensor


def _dtensor_api():
    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("no DTensor API in this torch")


def full_tensor_dropping_last_uneven_shard(dtensor):
    """A full_tensor() that loses the last rank's shard when a Shard placement splits its dim
    unevenly (the dim's size is not a multiple of the mesh dim's size)."""
    full = dtensor.full_tensor()
    for mesh_dim, place in enumerate(dtensor.placements):
        if place.is_shard():
            n, size = dtensor.device_mesh.size(mesh_dim), full.size(place.dim)
            if size % n:
                chunk = -(-size // n)
                return full.narrow(place.dim, 0, min((n - 1) * chunk, size))
    return full


def redistribute_taking_the_next_chunk(dtensor, mesh, placements):
    """A redistribute from Replicate to Shard(d) on a 1-D mesh that keeps the next rank's piece
    instead of its own, when the dim splits evenly (so every shard has the right shape)."""
    out = dtensor.redistribute(mesh, placements)
    target = placements[0]
    if mesh.ndim == 1 and dtensor.placements[0].is_replicate() and target.is_shard():
        d = target.dim % dtensor.ndim
        n, size = mesh.size(), dtensor.shape[d]
        if size and size % n == 0:
            k = (mesh.get_coordinate()[0] + 1) % n
            local = dtensor.to_local().chunk(n, d)[k]
            out = type(dtensor).from_local(
                local, mesh, [_dtensor_api().Shard(d)], run_check=False, shape=dtensor.shape, stride=dtensor.stride()
            )
    return out


def distribute_ignoring_src_data_rank(tensor, mesh, placements, src_data_rank=0):
    """A distribute_tensor that always takes the data from group rank 0 (None still means local)."""
    return _dtensor_api().distribute_tensor(
        tensor, mesh, placements, src_data_rank=None if src_data_rank is None else 0
    )
