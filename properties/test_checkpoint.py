"""Distributed checkpoints: a drawn state dict (tensors of every dtype and layout, DTensors on drawn
meshes and placements, nested containers, non-tensor values), and a DDP/FSDP2 model with its
optimizer, saved with ``torch.distributed.checkpoint`` and loaded into another sharding or
parallelism (and by one process alone), come back bit for bit (``fuzzdist.properties.checkpoint``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

try:
    from fuzzdist.properties import checkpoint
except ImportError as exc:  # torch without torch.distributed.checkpoint or DTensor
    pytest.skip(str(exc), allow_module_level=True)


@pytest.mark.fuzzdist(world_size=[2, 4])
@given(data=st.data())
def test_checkpoint_round_trip_keeps_values(rank_pool, data):
    """dcp.save (or async_save), then dcp.load into another layout on every rank (and no_dist on one):
    every rank's tensors and local shards equal the values rebuilt from the seeds, bitwise."""
    case = data.draw(checkpoint.checkpoint_cases(rank_pool.world_size), label="case")
    checkpoint.check(rank_pool, case)


@pytest.mark.fuzzdist(world_size=[2, 4])
@given(data=st.data())
def test_checkpoint_model_state_round_trip(rank_pool, data):
    """get_state_dict + dcp.save under DDP or FSDP2, then get_state_dict + dcp.load + set_state_dict
    under another parallelism: parameters, optimizer state and learning rate equal the saved ones."""
    case = data.draw(checkpoint.model_cases(rank_pool.world_size), label="case")
    checkpoint.check_model(rank_pool, case)
