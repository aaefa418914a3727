"""Planted bugs for the FSDP2 parity property: faulty FSDP reduce-scatter comms, each wrong only for
some inputs.  FSDP calls a comm set with ``FSDPModule.set_custom_reduce_scatter`` as
``comm.allocate(size, dtype=..., device=...)`` for its buffers and ``comm(output_tensor=...,
input_tensor=..., group=..., op=...)`` for the collective; ``fsdp.check(..., reduce_scatter=cls)``
builds ``cls()`` on every rank."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

# reduce_scatter_tensor is deprecated (a FutureWarning) where reduce_scatter_single exists
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class _Comm:
    """FSDP's default reduce-scatter: plain buffers, one ``reduce_scatter`` over ``group``."""

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: Any,
        async_op: bool = False,
    ) -> Any:
        return _REDUCE_SCATTER(output_tensor, input_tensor, group=group, op=op, async_op=async_op)


class CorruptingLargeReduceScatter(_Comm):
    """Adds 1 to the last element of each rank's output when the reduce-scatter input has 8 or
    more elements: FSDP's flat gradient buffer of a group that large comes back wrong."""

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: Any,
        async_op: bool = False,
    ) -> Any:
        super().__call__(output_tensor, input_tensor, group, op)
        if input_tensor.numel() >= 8 and output_tensor.numel():
            output_tensor.view(-1)[-1] += 1
        return None


class WorldAveragingReduceScatter(_Comm):
    """Implements AVG as a SUM divided by the *world* size instead of ``group``'s size: right
    whenever FSDP reduce-scatters over all ranks, wrong over a sub-group (HSDP's shard dim)."""

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: Any,
        async_op: bool = False,
    ) -> Any:
        if op != dist.ReduceOp.AVG:
            return super().__call__(output_tensor, input_tensor, group, op, async_op)
        _REDUCE_SCATTER(output_tensor, input_tensor, group=group, op=dist.ReduceOp.SUM)
        output_tensor.div_(dist.get_world_size())  # the bug: should be group.size()
        return None
