"""Planted tensor-parallel bugs: ``parallelize_module`` stand-ins with a bug a user's own wrapper could have."""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.tensor.parallel import parallelize_module


def ignoring_src_data_rank(module: nn.Module, device_mesh: Any, parallelize_plan: Any, **kwargs: Any) -> nn.Module:
    """Drops ``src_data_rank``: torch's default, rank 0, scatters the parameters, whichever rank holds
    the model the user meant."""
    kwargs.pop("src_data_rank", None)
    return parallelize_module(module, device_mesh, parallelize_plan, **kwargs)
