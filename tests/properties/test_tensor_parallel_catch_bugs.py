"""The tensor-parallel property can fail: with a planted ``parallelize`` that drops ``src_data_rank``,
fuzzdist catches it and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
from helpers import planted_tensor_parallel as planted
from helpers.minimal import minimal_failure

from fuzzdist.properties import tensor_parallel as tp

# The shrunk example asserted below is that of 2 ranks.
pytestmark = pytest.mark.fuzzdist(world_size=2)


@pytest.mark.skipif(not tp.HAS_SRC_DATA_RANK, reason="this torch's parallelize_module has no src_data_rank")
def test_catches_a_parallelize_dropping_src_data_rank(rank_pool):
    f = minimal_failure(
        partial(tp.check, rank_pool, parallelize=planted.ignoring_src_data_rank),
        config=tp.tp_configs(rank_pool.world_size),
        seed=tp.SEEDS,
    )
    config = f.config
    # Only a source other than rank 0 shows it (rank 0 is torch's default; with None every rank builds
    # the true model): src_data_rank=1, whose decoy-free parameters are ignored for rank 0's decoys.
    assert config.src_data_rank == 1, config
    assert f.seed == 0, f
    # Everything else is the trivial model, one Colwise Linear 1 -> 1: rank 0's piece of its weight is
    # already its decoy, so the parameter check after parallelize_module shows it, before the step.
    assert config.layers == (tp.TPLayer("colwise", 1),), config
    assert (config.batch, config.seq, config.in_features, config.input_layout, config.sequence_dim) == (
        1,
        1,
        1,
        "R",
        1,
    ), config
    assert f.results[0] and f.results[0][0].what.startswith("after parallelize: layers.0."), f.results
