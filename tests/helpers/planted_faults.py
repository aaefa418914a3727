"""Planted bugs for the faults property: a survivor that swallows its collective's error, and a checkpoint
loader that accepts a checkpoint whose save never finished.  Both are module-level functions, so that the
fault world's processes can unpickle them."""

from __future__ import annotations

from typing import Any

import torch

from fuzzdist.properties.faults.rank import dcp_load, run_collective


def swallowing_collective(name: str, tensor: torch.Tensor, root: int, group: Any) -> torch.Tensor | None:
    """The collective, but an error is swallowed: the survivor goes on with its own input as the output."""
    try:
        return run_collective(name, tensor, root, group)
    except Exception:  # noqa: BLE001 - the planted bug
        return tensor


def lenient_load(state_dict: dict[str, torch.Tensor], checkpoint_id: str, process_group: Any) -> None:
    """``dcp.load``, but a checkpoint it cannot read is taken as loaded: the caller keeps what it allocated."""
    try:
        dcp_load(state_dict, checkpoint_id, process_group)
    except BaseException:  # noqa: BLE001 - the planted bug (DCP's CheckpointException is a BaseException)
        pass
