"""Tensor parallelism: ``parallelize_module`` with Colwise/Rowwise/Sequence plans gives the outputs,
gradients and stepped parameters of the unparallelised model (``fuzzdist.properties.tensor_parallel``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

try:
    from fuzzdist.properties import tensor_parallel
except ImportError as exc:  # torch without torch.distributed.tensor.parallel
    pytest.skip(str(exc), allow_module_level=True)


@pytest.mark.fuzzdist(world_size=2)
@given(data=st.data(), seed=tensor_parallel.SEEDS)
def test_tensor_parallel_matches_local(rank_pool, data, seed):
    """A drawn MLP parallelised with drawn Colwise/Rowwise/Sequence plans: each rank's parameters, output,
    gradients and parameters after an SGD step are its pieces of the local model's."""
    config = data.draw(tensor_parallel.tp_configs(rank_pool.world_size), label="config")
    tensor_parallel.check(rank_pool, config, seed)
