"""The FSDP1 family's known-bug predicates recognise their bugs' failures, and only those: each is tried on the
family's real config class and on Problem records shaped as the property reports them."""

from __future__ import annotations

import pytest
import torch

from fuzzdist import known_bugs
from fuzzdist.errors import PropertyFailure
from fuzzdist.pool.capabilities.torch_features import missing_fully_shard
from fuzzdist.problems import Kind, Problem

if missing_fully_shard():  # an older torch; any other ImportError below fails, with its traceback
    pytest.skip(missing_fully_shard() or "", allow_module_level=True)

from fuzzdist.properties.fsdp1.config import FSDP1Config

GRADIENT = Problem(
    Kind.MISMATCH, "step 0: grad layers.0.weight", index=0, got=0.0, expected=1.0, bound=1e-7, count=1, size=1
)
ROUND_TRIP = Problem(
    Kind.MISMATCH, "one step after loading: param layers.0.weight", index=0, got=0.0, expected=1.0, count=1, size=1
)
MORE = Problem(Kind.MORE, count=4)


def _config(**fields):
    return FSDP1Config(widths=(1, 1), batch_sizes=(1, 1), **fields)


def _recognised(config, *problems):
    bug = known_bugs.recognise(
        "fsdp1",
        {"config": config, "dtype": torch.float32, "seed": 0},
        PropertyFailure("FSDP1 differs", [], list(problems)),
    )
    return None if bug is None else bug.id


HYBRID = {"sharding_strategy": "HYBRID_SHARD", "hybrid_mesh": (2, 1)}
ADAM = {"use_orig_params": True, "optimizer": "adam"}


def test_hybrid_shard_size_one_is_recognised_with_a_left_out_count():
    assert _recognised(_config(**HYBRID), GRADIENT, MORE) == "fsdp1-hybrid-shard-size-one-skips-replicas"


def test_hybrid_shard_over_two_ranks_is_not_the_bug():
    assert _recognised(_config(sharding_strategy="HYBRID_SHARD", hybrid_mesh=(1, 2)), GRADIENT) is None


def test_exp_avg_bug_is_recognised_from_round_trip_differences_only():
    assert _recognised(_config(**ADAM), ROUND_TRIP) == "fsdp1-optim-state-dict-exp-avg-is-exp-avg-sq"
    assert _recognised(_config(**ADAM), ROUND_TRIP, GRADIENT) is None  # a gradient beyond its bound is not it
    assert _recognised(_config(**ADAM, state_dict_type="SHARDED_STATE_DICT"), ROUND_TRIP) is None
    assert _recognised(_config(use_orig_params=True), ROUND_TRIP) is None  # SGD has no exp_avg
    # NO_SHARD's full optimizer state dict holds the right exp_avg: its round-trip differences are not this bug
    assert _recognised(_config(**ADAM, sharding_strategy="NO_SHARD"), ROUND_TRIP) is None


def test_an_example_meeting_both_wrong_result_bugs_is_known():
    assert _recognised(_config(**HYBRID, **ADAM), GRADIENT, ROUND_TRIP, MORE) is not None
