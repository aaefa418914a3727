"""The shared-tensor property can fail: each planted sharing bug is caught and shrunk to a minimal
example."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

import planted_sharing
import pytest
import torch
from hypothesis import Phase, given, settings

from fuzzdist import RankError, RankFailure
from fuzzdist import strategies as fst
from fuzzdist.sharing import SharingError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "properties"))
import test_shared_tensors  # noqa: E402


class Failure(NamedTuple):
    spec: fst.TensorSpec
    seed: int
    src: int
    writers: tuple[int, ...]
    mode: fst.SharingStrategyMode
    outcome: Any  # the per-rank problems, or the RankFailure


def _shrunk_failure(pool, **planted) -> Failure:
    """The shared-tensor property with ``planted`` in place of the real sharing. Returns the
    example Hypothesis shrank to (the last failing one it ran)."""
    failing: list[Failure] = []
    ws = pool.world_size

    @settings(max_examples=300, database=None, derandomize=True, deadline=None, report_multiple_bugs=False,
              phases=(Phase.generate, Phase.shrink))  # no explain phase: it reruns the failure many times
    @given(spec=test_shared_tensors.SPECS, seed=test_shared_tensors.SEEDS, mode=test_shared_tensors.MODES,
           src=fst.source_ranks(ws), writers=fst.rank_subsets(ws),
           write_pattern=test_shared_tensors.WRITE_PATTERNS, write_seed=test_shared_tensors.SEEDS)
    def prop(spec, seed, mode, src, writers, write_pattern, write_seed):
        try:
            problems = pool.run(test_shared_tensors.share_write_and_check, spec, seed, src, writers,
                                write_pattern, write_seed, mode, **planted)
        except RankFailure as exc:
            failing.append(Failure(spec, seed, src, writers, mode, exc))
            raise
        if problems != [None] * ws:
            failing.append(Failure(spec, seed, src, writers, mode, problems))
            raise AssertionError(problems)

    with pytest.raises(AssertionError):
        prop()
    assert failing, "the planted bug was never caught"
    return failing[-1]


def test_catches_a_sharer_that_sends_a_copy(rank_pool):
    # the broadcast_object_list pitfall: a plain pickle of a CPU tensor is a copy
    f = _shrunk_failure(rank_pool, share=planted_sharing.share_pickling_large)
    assert f.spec == fst.TensorSpec((5,), torch.float32)  # the smallest tensor the bug copies
    assert f.src == 0 and f.writers == (0,) and f.mode.strategy == "file_descriptor"
    assert f.outcome[0] is None  # the source sees its own write; its receiver holds a copy that doesn't
    assert len(f.outcome[1]) == 1
    assert f.outcome[1][0].startswith("after rank 0's write (round 0): 5 of 5 elements differ")


def test_catches_a_receiver_that_copies_views(rank_pool):
    f = _shrunk_failure(rank_pool, receive=planted_sharing.receive_contiguous)
    # the smallest tensor whose .contiguous() is a copy: a transposed 2x2
    assert f.spec == fst.TensorSpec((2, 2), torch.float32, layout="transposed")
    assert f.src == 0 and f.mode.strategy == "file_descriptor"
    assert f.outcome[0] is None
    assert len(f.outcome[1]) == 1 and f.outcome[1][0].startswith("received (shape, dtype, stride")
    assert "(2, 1), 0, 16), expected ((2, 2), torch.float32, (1, 2), 0, 16)" in f.outcome[1][0]


def test_catches_a_receiver_that_keeps_the_memory(rank_pool):
    try:
        f = _shrunk_failure(rank_pool, receive=planted_sharing.receive_and_keep)
    finally:
        rank_pool.run(planted_sharing.forget_kept)
    assert f.spec == fst.TensorSpec((1,), torch.float32) and f.src == 0
    assert f.mode.strategy == "file_descriptor" and f.writers == (0,)
    assert f.outcome[0] is None  # the source let go; the receiver still maps the segment
    assert len(f.outcome[1]) == 1
    assert f.outcome[1][0].startswith(
        "still holds shared memory after every rank dropped the tensor: ['/dev/shm/torch_")


@pytest.mark.fuzzdist(world_size=3)
def test_catches_one_handle_for_every_receiver(rank_pool):
    # needs two receivers: with file_descriptor, the second one to open the handle finds it gone
    f = _shrunk_failure(rank_pool, share=planted_sharing.share_one_handle)
    assert f.spec == fst.TensorSpec((1,), torch.float32) and f.src == 0
    assert f.mode.strategy == "file_descriptor"
    assert isinstance(f.outcome, RankError)
    assert f.outcome.ranks == [0, 1, 2] and not f.outcome.stragglers  # every rank failed together
    assert set(f.outcome.exc_types.values()) == {f"{SharingError.__module__}.{SharingError.__qualname__}"}
