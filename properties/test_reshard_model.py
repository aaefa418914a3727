"""Model and optimizer state across world sizes: a DDP, FSDP2 or FSDP1 model and its optimizer, saved with
DCP from some ranks of the pool, load into a different number of ranks under another drawn sharding, every
parameter, optimizer state and learning rate bitwise (``fuzzdist.properties.reshard.model_state``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.pool.capabilities.torch_features import missing_fully_shard

if missing_fully_shard():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_fully_shard() or "", allow_module_level=True)

from fuzzdist.properties.reshard import model_state


@pytest.mark.fuzzdist(world_size=[2, 3], timeout=model_state.TIMEOUT_S)
@given(data=st.data())
def test_model_state_loads_into_another_world_size(rank_pool, data):
    """What the first W ranks save of a sharded model and its optimizer, the first W' != W ranks load
    bitwise under their own drawn sharding."""
    case = data.draw(model_state.model_reshard_cases(rank_pool.world_size), label="case")
    model_state.check_model(rank_pool, case)
