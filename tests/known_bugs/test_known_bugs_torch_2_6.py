"""Known bugs as torch 2.6.0 shows them: the same bug in other words (gloo's messages changed since)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fuzzdist import known_bugs
from fuzzdist.errors import RankCrash, RankError
from fuzzdist.properties.comm_hooks import PowerSGDCase


@dataclass
class _Config:
    bucket_cap_mb: float | None = 1e-05
    find_unused_parameters: bool = True


def _crash(output: str, stack: str) -> RankCrash:
    return RankCrash([0], {0: -6}, {0: stack}, last_output={0: output})


IN_THE_HOOK = (
    'File "/venv/lib/python3.11/site-packages/torch/distributed/algorithms/ddp_comm_hooks/'
    'powerSGD_hook.py", line 589 in unpack_uncompressed_tensors_and_allreduce_ps'
)
ENFORCE_2_13 = (
    "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at "
    "pair.cc:456] op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match expected "
    "size. Is there a distributed collective mismatch in your code?"
)
ENFORCE_2_6 = (
    "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at "
    "/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. 40 vs 8"
)


def _recognised(failure: RankCrash, case: object = None) -> str | None:
    bug = known_bugs.recognise("comm_hooks", {"case": case or PowerSGDCase(_Config())}, failure)
    return bug.id if bug else None


def test_powersgd_abort_in_torch_2_6s_words_is_the_known_bug():
    assert _recognised(_crash(ENFORCE_2_13, IN_THE_HOOK)) == "powersgd-multiple-buckets-hangs"
    assert _recognised(_crash(ENFORCE_2_6, IN_THE_HOOK)) == "powersgd-multiple-buckets-hangs"


def test_powersgd_abort_elsewhere_or_for_another_reason_stays_a_failure():
    assert _recognised(_crash(ENFORCE_2_6, 'File "model.py", line 3 in forward')) is None  # not in the hook
    assert _recognised(_crash("terminate called: some other enforce", IN_THE_HOOK)) is None
    one_bucket = PowerSGDCase(_Config(bucket_cap_mb=None, find_unused_parameters=False))
    assert _recognised(_crash(ENFORCE_2_6, IN_THE_HOOK), one_bucket) is None


OVERLAP = (
    "Shards ShardMetadata(shard_offsets=[0], shard_sizes=[0], placement=rank:0/cpu) and "
    "ShardMetadata(shard_offsets=[0], shard_sizes=[0], placement=rank:1/cpu) overlap"
)
SHARD_TRACEBACK = (
    'File "torch/distributed/_shard/sharding_spec/chunk_sharding_spec.py", line 219, in shard\n'
    'File "torch/distributed/_shard/sharding_spec/_internals.py", line 111, in '
    "validate_non_overlapping_shards_metadata"
)


def _shard_error(message: str, traceback: str = SHARD_TRACEBACK) -> RankError:
    return RankError(
        [0, 1],
        {0: traceback, 1: traceback},
        {0: "ValueError", 1: "ValueError"},
        {0: ValueError(message), 1: ValueError(message)},
    )


def _sharded_example() -> dict:
    from fuzzdist.properties.sharded_tensor import ShardCase
    from fuzzdist.strategies import TensorSpec

    return {"case": ShardCase(TensorSpec((0,), torch.float32), 0, 0, (0, 1))}


def test_empty_shards_taken_for_overlapping_is_recognised():
    bug = known_bugs.recognise("sharded_tensor", _sharded_example(), _shard_error(OVERLAP))
    assert bug is not None and bug.id == "sharded-tensor-empty-shards-overlap"


def test_shards_that_really_overlap_or_another_error_stay_failures():
    real = OVERLAP.replace("shard_sizes=[0], placement=rank:1", "shard_sizes=[3], placement=rank:1").replace(
        "shard_sizes=[0], placement=rank:0", "shard_sizes=[2], placement=rank:0"
    )
    for failure in (
        _shard_error(real),
        _shard_error(OVERLAP, 'File "model.py", line 1'),
        _shard_error("some other error"),
    ):
        assert known_bugs.recognise("sharded_tensor", _sharded_example(), failure) is None


PADDING = (
    "The input size 0, plus negative padding 0 and 0 resulted in a negative output size, which is invalid. "
    "Check dimension 1 of your input."
)
PAD_TRACEBACK = 'File "torch/distributed/tensor/_collective_utils.py", line 177, in pad_tensor'


def _padding_error(message: str = PADDING, traceback: str = PAD_TRACEBACK) -> RankError:
    return RankError(
        [0, 1],
        {0: traceback, 1: traceback},
        {0: "RuntimeError", 1: "RuntimeError"},
        {0: RuntimeError(message), 1: RuntimeError(message)},
    )


def _roundtrip(shape: tuple) -> dict:
    from fuzzdist.properties.dtensor import RoundTrip
    from fuzzdist.strategies import TensorSpec

    return {"case": RoundTrip(TensorSpec(shape, torch.float32), 0, (2,), ("R",))}


def test_dtensor_negative_padding_of_an_empty_dim_is_recognised():
    bug = known_bugs.recognise("dtensor", _roundtrip((1, 0)), _padding_error())
    assert bug is not None and bug.id == "dtensor-empty-shard-full-tensor-pads-negative"


def test_dtensor_negative_padding_elsewhere_stays_a_failure():
    assert known_bugs.recognise("dtensor", _roundtrip((3, 2)), _padding_error()) is None  # no empty dim
    assert known_bugs.recognise("dtensor", _roundtrip((1, 0)), _padding_error(traceback="model.py")) is None
    assert known_bugs.recognise("dtensor", _roundtrip((1, 0)), _padding_error("another error")) is None
