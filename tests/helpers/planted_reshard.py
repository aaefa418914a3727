"""Planted bugs for the resharding checkpoint property: faulty saves, each wrong only for some inputs.
``reshard.check(..., save=fn)`` calls ``fn(state_dict, checkpoint_id, process_group)`` on the saving ranks."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DTensor, Shard


def drops_the_last_ranks_shards(
    state_dict: dict[str, Any], checkpoint_id: str, process_group: dist.ProcessGroup
) -> None:
    """Saves zeros for the last saving rank's pieces of sharded DTensors when more than one rank saves: a
    checkpoint that one rank reads back alone is right, one written by several is not."""
    size = process_group.size()
    if size > 1 and dist.get_rank(process_group) == size - 1:
        for value in state_dict.values():
            if isinstance(value, DTensor) and any(isinstance(p, Shard) for p in value.placements):
                value.to_local().zero_()
    dcp.save(state_dict, checkpoint_id=checkpoint_id, process_group=process_group)


def drops_the_last_ranks_optimizer_shards(
    state_dict: dict[str, Any], checkpoint_id: str, process_group: dist.ProcessGroup
) -> None:
    """For ``reshard.model_state``: saves zeros for the last saving rank's pieces of sharded optimizer state
    (DTensors: FSDP2's) when more than one rank saves; parameters, and DDP's replicated state, stay right."""
    size = process_group.size()
    if size > 1 and dist.get_rank(process_group) == size - 1:
        for per_param in state_dict["optim"]["state"].values():
            for value in per_param.values():
                if isinstance(value, DTensor) and any(isinstance(p, Shard) for p in value.placements):
                    value.to_local().zero_()
    dcp.save(state_dict, checkpoint_id=checkpoint_id, process_group=process_group)
