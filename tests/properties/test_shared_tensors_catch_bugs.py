"""The shared-tensor property can fail: each planted sharing bug is caught and shrunk to a minimal
example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_sharing
from helpers.minimal import minimal_failure

from fuzzdist import PropertyFailure, RankError
from fuzzdist import strategies as fst
from fuzzdist.errors import SharingError
from fuzzdist.properties import shared_tensors as shared


def _shrunk_failure(pool, expect=PropertyFailure, **planted):
    """The shared-tensor property with ``planted`` in place of the real sharing; the minimal failure."""
    ws = pool.world_size
    return minimal_failure(
        partial(shared.check, pool, **planted),
        expect=expect,
        spec=shared.SPECS,
        seed=shared.SEEDS,
        mode=shared.MODES,
        src=fst.source_ranks(ws),
        writers=fst.rank_subsets(ws),
        write_pattern=shared.WRITE_PATTERNS,
        write_seed=shared.SEEDS,
    )


def test_catches_a_sharer_that_sends_a_copy(rank_pool):
    # the broadcast_object_list pitfall: a plain pickle of a CPU tensor is a copy
    f = _shrunk_failure(rank_pool, share=planted_sharing.share_pickling_large)
    assert f.spec == fst.TensorSpec((5,), torch.float32)  # the smallest tensor the bug copies
    assert f.src == 0 and f.writers == (0,) and f.mode.strategy == "file_descriptor"
    assert f.results[0] is None  # the source sees its own write; its receiver holds a copy that doesn't
    assert len(f.results[1]) == 1
    assert str(f.results[1][0]).startswith("after rank 0's write (round 0): 5 of 5 elements differ")


def test_catches_a_receiver_that_copies_views(rank_pool):
    f = _shrunk_failure(rank_pool, receive=planted_sharing.receive_contiguous)
    # the smallest tensor whose .contiguous() is a copy: a transposed 2x2
    assert f.spec == fst.TensorSpec((2, 2), torch.float32, layout="transposed")
    assert f.src == 0 and f.mode.strategy == "file_descriptor"
    assert f.results[0] is None
    assert len(f.results[1]) == 1 and str(f.results[1][0]).startswith("received (shape, dtype, stride")
    assert "(2, 1), 0, 16), expected ((2, 2), torch.float32, (1, 2), 0, 16)" in str(f.results[1][0])


def test_catches_a_receiver_that_keeps_the_memory(rank_pool):
    try:
        f = _shrunk_failure(rank_pool, receive=planted_sharing.receive_and_keep)
    finally:
        rank_pool.run(planted_sharing.forget_kept)
    assert f.spec == fst.TensorSpec((1,), torch.float32) and f.src == 0
    assert f.mode.strategy == "file_descriptor" and f.writers == (0,)
    assert f.results[0] is None  # the source let go; the receiver still maps the segment
    assert len(f.results[1]) == 1
    assert str(f.results[1][0]).startswith(
        "still holds shared memory after every rank dropped the tensor: ['/dev/shm/torch_"
    )


@pytest.mark.fuzzdist(world_size=3)
def test_catches_one_handle_for_every_receiver(rank_pool):
    # needs two receivers: with file_descriptor, the second one to open the handle finds it gone
    f = _shrunk_failure(rank_pool, expect=RankError, share=planted_sharing.share_one_handle)
    assert f.spec == fst.TensorSpec((1,), torch.float32) and f.src == 0
    assert f.mode.strategy == "file_descriptor"
    assert isinstance(f.error, RankError)
    assert f.error.ranks == [0, 1, 2] and not f.error.stragglers  # every rank failed together
    assert set(f.error.exc_types.values()) == {f"{SharingError.__module__}.{SharingError.__qualname__}"}
