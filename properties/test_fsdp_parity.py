"""FSDP2 parity: ``fully_shard``'s gathered gradients and parameters match a local model's at every
step, over 1-D and HSDP meshes, reshard options and mixed precision (``fuzzdist.properties.fsdp``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.pool.capabilities.torch_features import missing_fully_shard

if missing_fully_shard():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_fully_shard() or "", allow_module_level=True)

from fuzzdist.properties import fsdp


@pytest.mark.fuzzdist(world_size=[2, 4], device=["cpu"])
@given(data=st.data(), dtype=fsdp.DTYPES, seed=fsdp.SEEDS)
def test_fsdp_gradients_match_local(rank_pool, data, dtype, seed):
    """FSDP2's gathered gradients equal the mean of each rank's local gradient within the reduce
    dtype's rounding bound, and its parameters the local model's, at every step, on every rank."""
    config = data.draw(fst.fsdp_configs(rank_pool.world_size), label="config")
    fsdp.check(rank_pool, config, dtype, seed)
