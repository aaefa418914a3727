"""ShardedTensor with ChunkShardingSpec: shard a drawn tensor over the ranks in a drawn placement
order, then gather it: every rank holds its torch.chunk piece at the offsets its metadata states,
and the gathered tensor is the original, bitwise; its state dict survives a DCP round trip into
another placement order (``fuzzdist.properties.sharded_tensor``).  ShardedTensor is deprecated in
favour of DTensor: its FutureWarnings are expected."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

try:
    from fuzzdist.properties import sharded_tensor
except ImportError as exc:  # torch without ShardedTensor or DCP
    pytest.skip(str(exc), allow_module_level=True)


@pytest.mark.fuzzdist(world_size=[2, 4])
@given(data=st.data())
def test_sharded_tensor_shard_and_gather(rank_pool, data):
    """ChunkShardingSpec.shard then ShardedTensor.gather: torch.chunk pieces in placement order,
    and the original back on the destination.  Known: sharded-tensor-gather-default-dtype-float32."""
    case = data.draw(sharded_tensor.shard_cases(rank_pool.world_size), label="case")
    sharded_tensor.check(rank_pool, case)
