"""The FSDP1 family's known-bug predicates recognise their bugs' failures, and only those: each is tried on the
family's real config class and on Problem records shaped as the property reports them."""

from __future__ import annotations

import pytest
import torch

from fuzzdist import known_bugs
from fuzzdist.errors import PropertyFailure, RankCrash, RankError
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


# what a rank that died in summon_full_params(with_grads=True)'s all-gather left behind (gloo's enforce
# message on stderr, faulthandler's stack at the SIGABRT), shortened
_GLOO_ABORT = (
    "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
    "  what():  [enforce fail at gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 4 vs 2. "
    "Received data size doesn't match expected size."
)
_UNSHARD_GRAD_STACK = (
    'File ".../torch/distributed/distributed_c10d.py", line 4394 in all_gather_single\n'
    'File ".../torch/distributed/fsdp/_flat_param.py", line 1599 in unshard_grad\n'
)
SUMMON_GRADS = {"use_orig_params": True}


def _crash(stack=_UNSHARD_GRAD_STACK, output=_GLOO_ABORT):
    return RankCrash([1, 3], {1: -6, 3: -6}, {1: stack, 3: stack}, last_output={1: output, 3: output})


def _recognised_crash(config, dtype, failure):
    bug = known_bugs.recognise("fsdp1", {"config": config, "dtype": dtype, "seed": 0}, failure)
    return None if bug is None else bug.id


def test_summon_grads_abort_is_recognised_for_a_float64_model():
    config = FSDP1Config(widths=(1, 1), batch_sizes=(1, 1, 1, 1), use_orig_params=True)
    assert _recognised_crash(config, torch.float64, _crash()) == "fsdp1-summon-grads-none-shard-float32-aborts"


def test_summon_grads_abort_needs_a_non_float32_sharded_orig_params_model():
    # float32 zeros match a float32 model's shards, and the other paths never call unshard_grad's all-gather
    assert _recognised_crash(_config(**SUMMON_GRADS), torch.float32, _crash()) is None
    assert _recognised_crash(_config(), torch.float64, _crash()) is None
    assert _recognised_crash(_config(**SUMMON_GRADS, sharding_strategy="NO_SHARD"), torch.float64, _crash()) is None


def test_summon_grads_abort_needs_gloo_size_check_inside_unshard_grad():
    config = _config(**SUMMON_GRADS)
    elsewhere = 'File ".../torch/distributed/fsdp/_runtime_utils.py", line 800 in _reduce_grad\n'
    assert _recognised_crash(config, torch.float64, _crash(stack=elsewhere)) is None
    assert _recognised_crash(config, torch.float64, _crash(output="Segmentation fault")) is None
    # a wrong result from the same config is not this crash
    assert _recognised_crash(config, torch.float64, PropertyFailure("FSDP1 differs", [], [GRADIENT])) is None


LOCAL_HYBRID = {"sharding_strategy": "HYBRID_SHARD", "hybrid_mesh": (2, 2), "state_dict_type": "LOCAL_STATE_DICT"}


def _ranks_raised(*excs: BaseException) -> RankError:
    """Ranks 2, 3, ... raised ``excs``, as the pool reports it; ranks 0 and 1 were left waiting."""
    raised = {2 + i: exc for i, exc in enumerate(excs)}
    return RankError(
        list(raised),
        dict.fromkeys(raised, "Traceback ..."),
        {r: f"builtins.{type(e).__name__}" for r, e in raised.items()},
        raised,
        stragglers=[0, 1],
    )


RANK_0_NOT_IN_GROUP = ValueError("Global rank 0 does not exist in input process group: [2, 3]")
NOT_IN_GROUP = _ranks_raised(
    RANK_0_NOT_IN_GROUP, ValueError("Global rank 1 does not exist in input process group: [2, 3]")
)


def _recognised_raise(config, failure):
    bug = known_bugs.recognise("fsdp1", {"config": config, "dtype": torch.float32, "seed": 0}, failure)
    return None if bug is None else bug.id


def test_local_state_dict_group_rank_is_recognised_on_a_two_by_two_hybrid_mesh():
    config = FSDP1Config(widths=(1, 1), batch_sizes=(1, 1, 1, 1), **LOCAL_HYBRID)
    assert _recognised_raise(config, NOT_IN_GROUP) == "fsdp1-local-state-dict-hybrid-shard-group-rank"


def test_local_state_dict_group_rank_needs_local_state_dict_and_several_shard_groups():
    batches = {"widths": (1, 1), "batch_sizes": (1, 1, 1, 1)}
    assert (
        _recognised_raise(
            FSDP1Config(**batches, **{**LOCAL_HYBRID, "state_dict_type": "SHARDED_STATE_DICT"}), NOT_IN_GROUP
        )
        is None
    )
    # one shard group holds global ranks 0, 1, ...: its indices within the group are the global ranks
    assert _recognised_raise(FSDP1Config(**batches, **{**LOCAL_HYBRID, "hybrid_mesh": (1, 4)}), NOT_IN_GROUP) is None
    assert _recognised_raise(FSDP1Config(**batches, state_dict_type="LOCAL_STATE_DICT"), NOT_IN_GROUP) is None


def test_local_state_dict_group_rank_needs_every_raise_to_be_shardedtensors_value_error():
    config = FSDP1Config(widths=(1, 1), batch_sizes=(1, 1, 1, 1), **LOCAL_HYBRID)
    other = ValueError("some other value error")
    assert _recognised_raise(config, _ranks_raised(RANK_0_NOT_IN_GROUP, other)) is None
    runtime = RuntimeError("Global rank 1 does not exist in input process group: [2, 3]")
    assert _recognised_raise(config, _ranks_raised(RANK_0_NOT_IN_GROUP, runtime)) is None
    assert _recognised_raise(config, PropertyFailure("FSDP1 differs", [], [GRADIENT])) is None
