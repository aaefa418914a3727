"""The FSDP2 parity property can fail: with a faulty reduce-scatter planted under FSDP through its own
``set_custom_reduce_scatter`` hook, fuzzdist catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from helpers import planted_fsdp
from helpers.minimal import minimal_failure

from fuzzdist import strategies as fst
from fuzzdist.pool.capabilities.torch_features import missing_fully_shard

if missing_fully_shard():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_fully_shard() or "", allow_module_level=True)

from fuzzdist.properties import fsdp


def _shrunk(pool, comm):
    f = minimal_failure(
        partial(fsdp.check, pool, reduce_scatter=comm),
        config=fst.fsdp_configs(pool.world_size),
        dtype=fsdp.DTYPES,
        seed=fsdp.SEEDS,
    )
    return f.config, f.dtype, f.seed, f.error


def _padded_numel(config: fst.FSDPConfig) -> int:
    """Elements of the root group's reduce-scatter input: each parameter's dim 0 padded to a multiple
    of the shard size (FSDP2 shards with torch.chunk and pads every piece to the same size)."""
    shard = config.shard_size
    return sum(math.ceil(p.shape[0] / shard) * shard * p[0].numel() for p in config.build_model(0).parameters())


@pytest.mark.fuzzdist(world_size=2)
def test_fsdp_parity_catches_a_corrupted_large_reduce_scatter(rank_pool):
    config, dtype, seed, error = _shrunk(rank_pool, planted_fsdp.CorruptingLargeReduceScatter)
    # Everything the bug does not depend on shrinks away: the 1-D mesh, one root group, FSDP's
    # defaults, batch 1, one SGD step, float32...
    assert config.mesh_shape == (2,) and not config.per_layer and not config.mixed_precision, config
    assert config.batch_sizes == (1, 1) and config.steps == 1 and config.optimizer == "sgd", config
    assert dtype == torch.float32 and seed == 0
    # ...to a model whose one flat gradient buffer just reaches 8 elements, and only with FSDP's
    # padding: its parameters hold fewer than 8.
    model_numel = sum(p.numel() for p in config.build_model(0).parameters())
    assert _padded_numel(config) >= 8 > model_numel, config
    assert "FSDP differs from the local reference" in str(error) and "step 0: grad" in str(error)


@pytest.mark.fuzzdist(world_size=4)
def test_fsdp_parity_catches_averaging_over_the_world_on_hsdp(rank_pool):
    config, dtype, seed, error = _shrunk(rank_pool, planted_fsdp.WorldAveragingReduceScatter)
    # Only HSDP's 2 x 2 mesh reduce-scatters over fewer ranks than the world; everything else
    # shrinks to the trivial setup, with FSDP passing AVG (float32; float64 takes FSDP's SUM path).
    assert config == fst.FSDPConfig(widths=(1, 1), batch_sizes=(1,) * 4, mesh_shape=(2, 2)), config
    assert dtype == torch.float32 and seed == 0
    assert "step 0: grad layers.0.weight" in str(error) and "differ" in str(error)
