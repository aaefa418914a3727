"""The resharding family's known-bug predicate recognises its bug's failures, and only those: tried on the
family's real case class and on rank errors shaped as the pool reports them."""

from __future__ import annotations

import pytest

from fuzzdist import known_bugs
from fuzzdist.errors import RankError
from fuzzdist.pool.capabilities.torch_features import missing_fully_shard

if missing_fully_shard():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_fully_shard() or "", allow_module_level=True)

from fuzzdist.properties.reshard.model_state import ModelReshardCase, Sharding

CHECKPOINT_EXCEPTION = "torch.distributed.checkpoint.api.CheckpointException"
MISSING_KEY = "RuntimeError: Missing key in checkpoint state_dict: optim.param_groups."
BUG = "fsdp1-dcp-load-raises-missing-key-optim-param-groups"


def rank_error(exc_type, last_line, ranks):
    """Every rank raising ``exc_type`` (a qualified name), its traceback ending in ``last_line``, as the pool
    reports it."""
    trace = f"Traceback (most recent call last): (RANK 2)\n  ...\n{last_line}\n"
    return RankError(
        list(range(ranks)),
        dict.fromkeys(range(ranks), trace),
        dict.fromkeys(range(ranks), exc_type),
        {r: RuntimeError("CheckpointException ranks:dict_keys([2])") for r in range(ranks)},
    )


def _recognised(case, failure):
    bug = known_bugs.recognise("reshard", {"case": case}, failure)
    return None if bug is None else bug.id


def test_fsdp1_load_missing_key_is_recognised_only_loading_into_sharded_fsdp1():
    failure = rank_error(CHECKPOINT_EXCEPTION, MISSING_KEY, ranks=3)
    fsdp1 = Sharding("fsdp1")
    assert _recognised(ModelReshardCase(2, 3, (3, 2), load=fsdp1), failure) == BUG
    assert _recognised(ModelReshardCase(2, 3, (3, 2), load=Sharding("fsdp2")), failure) is None
    assert _recognised(ModelReshardCase(2, 3, (3, 2), load=Sharding("fsdp1", strategy="NO_SHARD")), failure) is None
    assert _recognised(ModelReshardCase(2, 3, (3, 2), save=fsdp1), failure) is None  # FSDP1 saved, DDP loaded
    other = rank_error(CHECKPOINT_EXCEPTION, "RuntimeError: size mismatch", ranks=3)
    assert _recognised(ModelReshardCase(2, 3, (3, 2), load=fsdp1), other) is None
