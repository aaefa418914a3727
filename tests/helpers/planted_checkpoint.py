"""Planted bugs for the checkpoint properties (``fuzzdist.properties.checkpoint``): loads and a
``set_state_dict`` that are wrong only for some state dicts.  Each has the signature of the keyword
it replaces (``load(state_dict, checkpoint_id, no_dist)``, ``set_state(model, optimizer,
model_state_dict=, optim_state_dict=)``) and delegates the rest to torch."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.state_dict import set_model_state_dict


def _no_dist(no_dist: bool) -> dict[str, bool]:
    """``no_dist`` for ``dcp.load`` only when asked for, as the property's own load passes it: torch 2.6's
    dcp.load has no such parameter (and there the property never asks for a single-process load)."""
    return {"no_dist": True} if no_dist else {}


class _FirstChunkPlanner(DefaultLoadPlanner):
    """Reads each tensor only from the chunk saved at offset 0 (as if every checkpoint had been saved
    unsharded): elements that live in any other saved chunk are never read."""

    def create_local_plan(self) -> Any:
        plan = super().create_local_plan()
        plan.items = [
            item for item in plan.items if item.storage_index.offset is None or not any(item.storage_index.offset)
        ]
        return plan


def load_reading_only_the_first_chunk(state_dict: dict[str, Any], checkpoint_id: str, no_dist: bool) -> None:
    """``dcp.load`` with a planner that reads only each tensor's first saved chunk."""
    dcp.load(state_dict, checkpoint_id=checkpoint_id, planner=_FirstChunkPlanner(), **_no_dist(no_dist))


def _copies(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _copies(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copies(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return obj.clone()  # a DTensor's clone is a DTensor with cloned local data
    return obj


def load_into_copies(state_dict: dict[str, Any], checkpoint_id: str, no_dist: bool) -> None:
    """Loads into copies of the caller's tensors and puts the copies in the state dict: the values
    arrive, but not in the tensors the caller allocated."""
    copies = _copies(state_dict)
    dcp.load(copies, checkpoint_id=checkpoint_id, **_no_dist(no_dist))
    state_dict.update(copies)


def set_state_dict_ignoring_the_optimizer(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    model_state_dict: dict[str, Any],
    optim_state_dict: dict[str, Any],
) -> None:
    """Sets the model's state, but leaves the optimizer's as it was."""
    set_model_state_dict(model, model_state_dict)
