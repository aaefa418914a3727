"""The pipelining property can fail: with a planted schedule class passed as ``schedule_class``,
fuzzdist catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

import pytest
import torch
from helpers.minimal import minimal_failure

try:
    from fuzzdist.properties import pipelining
except ImportError as exc:  # torch without torch.distributed.pipelining
    pytest.skip(str(exc), allow_module_level=True)

from helpers import planted_pipelining as planted

# The shrunk examples below are those of 2 ranks.
pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk(pool, schedule_class):
    def check(config, dtype, seed):
        pipelining.check(pool, config, dtype, seed, schedule_class=schedule_class)

    return minimal_failure(
        check,
        config=pipelining.pipeline_configs(pool.world_size, schedule_class),
        dtype=pipelining.DTYPES,
        seed=pipelining.SEEDS,
    )


def test_pipelining_catches_unscaled_gradients(rank_pool):
    f = _shrunk(rank_pool, planted.IgnoresScaleGrads)
    # Needs scale_grads=True (the smallest choice, as drawn) and more than one micro-batch: 2, the
    # fewest above 1.  Everything else is the trivial pipeline: one Linear(1, 1) per stage (two stages
    # on two ranks), micro-batches of one row, mse, dynamic shapes, float32, seed 0.
    assert f.config == pipelining.PipeConfig(2, (1, 1, 1), (0, 1, 2), n_microbatches=2), f.config
    assert f.dtype == torch.float32 and f.seed == 0
    # Every stage's gradients are twice the documented ones (the sum, not the mean, of 2 micro-batches).
    assert f.results is not None
    assert str(f.results[0][0]).startswith("stage 0: grad 0.weight: 1 of 1 elements differ"), f.results
    assert str(f.results[1][0]).startswith("stage 1: grad 2.weight: 1 of 1 elements differ"), f.results


def test_pipelining_catches_misaligned_targets(rank_pool):
    f = _shrunk(rank_pool, planted.MisalignsTargets)
    # Needs two micro-batches (with one, the rolled target is the target); their random targets differ.
    # The rest is the trivial pipeline, as above.
    assert f.config == pipelining.PipeConfig(2, (1, 1, 1), (0, 1, 2), n_microbatches=2), f.config
    assert f.dtype == torch.float32 and f.seed == 0
    assert f.results is not None
    assert "loss of micro-batch 0: 1 of 1 elements differ" in str(f.results[1][0]), f.results
