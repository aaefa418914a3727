"""The zero-copy property can fail: each planted conversion bug is caught and shrunk to a minimal
example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_sharing
from helpers.minimal import minimal_failure
from hypothesis import strategies as st

from fuzzdist import PropertyFailure
from fuzzdist import strategies as fst
from fuzzdist.properties import zero_copy

# The planted conversions go through numpy, so they get the cases a numpy interface can represent.
NUMPY_CASES = zero_copy.alias_cases("cpu", (zero_copy.INTERFACES["cpu"][0].name,))


def test_catches_an_as_tensor_that_copies_one_dtype(rank_pool):
    f = minimal_failure(
        partial(zero_copy.check, rank_pool, convert=planted_sharing.as_tensor_copying_float64),
        case=NUMPY_CASES,
        seed=zero_copy.SEEDS,
    )
    assert f.case.view_dtype == torch.float64  # only float64 is copied...
    # ...and the smallest memory that holds one: 8 contiguous bytes of any dtype, viewed as float64
    assert f.case.spec.nbytes == 8 and f.case.spec.layout == "contiguous"
    for problems in f.results:  # ...and every rank sees the copy: same values, other memory
        assert len(problems) == 1 and str(problems[0]).startswith("copied: the result lives at cpu 0x")


def test_catches_an_interface_that_ignores_the_storage_offset(rank_pool):
    f = minimal_failure(
        partial(zero_copy.check, rank_pool, convert=planted_sharing.as_tensor_ignoring_storage_offset),
        case=NUMPY_CASES,
        seed=zero_copy.SEEDS,
    )
    # the smallest view whose first element is not at the start of its storage
    assert f.case.spec == fst.TensorSpec((1,), torch.float32, layout="sliced", storage_offset=1)
    assert f.case.view_dtype == torch.float32 and f.seed == 0
    for problems in f.results:
        assert str(problems[0]).startswith("copied: the result lives at cpu 0x")
        assert str(problems[1]).startswith("values: 1 of 1 elements differ")


def test_catches_a_write_that_lands_in_a_copy_of_shared_memory(rank_pool):
    # rank 0 shares and writes, under file_descriptor (pinned: the bug doesn't depend on them, and
    # fewer choices make the search and the shrinking shorter)
    f = minimal_failure(
        partial(zero_copy.check_shared, rank_pool, convert=planted_sharing.as_tensor_copying_float64),
        case=NUMPY_CASES,
        seed=zero_copy.SEEDS,
        src=st.just(0),
        writer=st.just(0),
        write_seed=zero_copy.SEEDS,
        mode=st.just(fst.SharingStrategyMode("file_descriptor")),
    )
    assert f.case.view_dtype == torch.float64 and f.case.spec.shape == (1,)
    # no rank's result is the shared memory, and rank 0 wrote into its private copy:
    assert len(f.results[0]) == 1 and str(f.results[0][0]).startswith("over memory shared by rank 0: copied: ")
    assert len(f.results[1]) == 2 and str(f.results[1][0]).startswith("over memory shared by rank 0: copied: ")
    assert str(f.results[1][1]).startswith("after rank 0 wrote through its result: 1 of 1 elements differ")


def test_catches_a_receiver_that_keeps_shared_memory(rank_pool):
    # the shared-tensor property's leak check, here after the interfaces have dropped their results too
    case = zero_copy.AliasCase(zero_copy.INTERFACES["cpu"][0].name, fst.TensorSpec((1,), torch.float32), torch.float32)
    mode = fst.SharingStrategyMode("file_descriptor")
    try:
        with pytest.raises(PropertyFailure) as caught:
            zero_copy.check_shared(rank_pool, case, 0, 0, 0, 0, mode, receive=planted_sharing.receive_and_keep)
    finally:
        rank_pool.run(planted_sharing.forget_kept)
    results = caught.value.results
    assert results[0] is None  # the source let go; the receiver still maps the segment
    assert len(results[1]) == 1
    assert str(results[1][0]).startswith("still holds shared memory after every rank dropped the tensor: ['/dev/shm/")
