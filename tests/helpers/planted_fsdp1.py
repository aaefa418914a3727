"""Planted bugs for the FSDP1 parity property: faulty FSDP1 communication hooks, each wrong only for some
inputs.  ``fsdp1.check(..., comm_hook=factory)`` registers ``factory(process_group)``'s ``(state, hook)``
on the root with ``FSDP.register_comm_hook``; FSDP1 calls ``hook(state, grad, output)`` to reduce-scatter
a sharded unit's flat gradient into ``output``, and ``hook(state, grad)`` to all-reduce NO_SHARD's in place."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms._comm_hooks.default_hooks import DefaultState, allreduce_hook, reduce_scatter_hook


def _default(state: DefaultState, grad: torch.Tensor, output: torch.Tensor | None) -> torch.Tensor:
    """FSDP1's own reduction; returns the tensor that holds this rank's result."""
    if output is None:
        allreduce_hook(state, grad)
        return grad
    reduce_scatter_hook(state, grad, output)
    return output


def _corrupting_large(state: DefaultState, grad: torch.Tensor, output: torch.Tensor | None = None) -> None:
    result = _default(state, grad, output)
    if grad.numel() >= 8 and result.numel():  # the bug: a flat gradient of 8 or more elements comes back wrong
        result.view(-1)[-1] += 1


class CorruptingLargeReduction:
    """Adds 1 to the last element of a rank's reduced gradient when the flat gradient FSDP reduces (its
    unit's parameters, padded to a multiple of the world size) has 8 or more elements."""

    def __call__(self, process_group: dist.ProcessGroup) -> tuple[Any, Any]:
        return DefaultState(process_group), _corrupting_large
