"""FSDP1 parity: ``FullyShardedDataParallel``'s full gradients and parameters match a local model's at every
step, over every sharding strategy, auto-wrapping, mixed precision, prefetching and ``no_sync``, and its
state dicts round-trip into a fresh FSDP model that trains identically (``fuzzdist.properties.fsdp1``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.pool.capabilities.torch_features import missing_fully_shard

if missing_fully_shard():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_fully_shard() or "", allow_module_level=True)

from fuzzdist.properties import fsdp1
from fuzzdist.properties.fsdp1.config import fsdp1_configs


@pytest.mark.fuzzdist(world_size=[2, 4], device=["cpu"])
@given(data=st.data(), dtype=fsdp1.DTYPES, seed=fsdp1.SEEDS)
def test_fsdp1_matches_local_and_round_trips(rank_pool, data, dtype, seed):
    """FSDP1's full gradients equal the mean of each rank's local gradient within the reduce dtype's
    rounding bound, its parameters the local model's, at every step; its state dict and optimizer state
    load into a fresh FSDP model that then holds and trains to the same values, bitwise."""
    config = data.draw(fsdp1_configs(rank_pool.world_size), label="config")
    fsdp1.check(rank_pool, config, dtype, seed)
