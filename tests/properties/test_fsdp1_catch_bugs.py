"""The FSDP1 parity property can fail: with a faulty gradient reduction planted under FSDP1 through its own
``register_comm_hook``, fuzzdist catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from helpers import planted_fsdp1
from helpers.minimal import minimal_failure

from fuzzdist.pool.capabilities.torch_features import missing_fully_shard

if missing_fully_shard():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_fully_shard() or "", allow_module_level=True)

from fuzzdist.properties import fsdp1
from fuzzdist.properties.fsdp1.config import FSDP1Config, fsdp1_configs


def _flat_numel(widths: tuple[int, ...], world: int) -> int:
    """Elements of the root unit's flat gradient: every Linear's weight and bias, padded to a multiple of
    the world size (FSDP1 shards one flat parameter into equal pieces)."""
    numel = sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
    return math.ceil(numel / world) * world


@pytest.mark.fuzzdist(world_size=2)
def test_fsdp1_catches_a_corrupted_large_reduction(rank_pool):
    # Comm hooks are FSDP1's only for the full-precision, non-hybrid strategies (torch refuses the others).
    configs = fsdp1_configs(2, mixed_precision=False).filter(lambda c: c.sharding_strategy != "HYBRID_SHARD")
    f = minimal_failure(
        partial(fsdp1.check, rank_pool, comm_hook=planted_fsdp1.CorruptingLargeReduction()),
        config=configs,
        dtype=fsdp1.DTYPES,
        seed=fsdp1.SEEDS,
    )
    config = f.config
    # Everything the bug does not depend on shrinks away: FULL_SHARD with FSDP's defaults, the root unit
    # alone, batch 1, one SGD step, a FULL_STATE_DICT round trip, float32...
    assert config == FSDP1Config(widths=config.widths, batch_sizes=(1, 1)), config
    assert f.dtype == torch.float32 and f.seed == 0
    # ...to one layer whose flat gradient just reaches 8 elements: one element fewer in either width
    # and it holds fewer than 8.
    assert len(config.widths) == 2 and _flat_numel(config.widths, 2) >= 8, config
    a, b = config.widths
    assert all(_flat_numel(w, 2) < 8 for w in ((a - 1, b), (a, b - 1)) if min(w) >= 1), config
    assert "FSDP1 differs from the local reference" in str(f.error) and "step 0: grad" in str(f.error)


@pytest.mark.fuzzdist(world_size=2)
@pytest.mark.parametrize("strategy", ["NO_SHARD", "FULL_SHARD"])
def test_fsdp1_round_trip_loads_a_copy_of_the_optimizer_state(rank_pool, strategy):
    # NO_SHARD's optim_state_dict of a use_orig_params model holds the optimizer's own Adam state, and
    # Optimizer.load_state_dict keeps what it is given: a round trip that loaded it uncopied made the fresh
    # optimizer share exp_avg with the original, so both stepped it and the params differed one step later.
    # FULL_SHARD's holds ShardedTensors, which the copy must keep loadable.
    config = FSDP1Config(
        widths=(1, 1),
        batch_sizes=(1, 1),
        sharding_strategy=strategy,
        use_orig_params=True,
        state_dict_type="SHARDED_STATE_DICT",
        optimizer="adam",
    )
    fsdp1.check(rank_pool, config, torch.float32, 0)
