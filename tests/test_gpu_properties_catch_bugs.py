"""The GPU properties can fail: planted bugs caught on a real GPU (skipped without one)."""

from __future__ import annotations

import sys
from pathlib import Path

import planted
import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from fuzzdist import strategies as fst

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "properties"))
import test_block_stream  # noqa: E402
import test_cuda_ipc  # noqa: E402
import test_cuda_zero_copy  # noqa: E402


@pytest.mark.fuzzdist(device="cuda", world_size=1)
@pytest.mark.needs("cuda", "block_current_stream")
def test_blocked_stream_property_catches_early_release(rank_pool):
    failing = []

    @settings(max_examples=200, database=None, derandomize=True, deadline=None, phases=[Phase.generate, Phase.shrink],
              report_multiple_bugs=False)
    @given(order=st.integers(1, 6).flatmap(fst.completion_orders))
    def prop(order):
        problems = rank_pool.run(test_block_stream.check_blocked_stream, order,
                                 make_work=planted.early_release_work)
        if problems != [[]]:
            failing.append(order)
            raise AssertionError(problems)

    with pytest.raises(AssertionError):
        prop()
    assert failing, "the early-releasing Work was never caught"
    order = failing[-1]
    # smallest exposing schedule: two Works, the early one (0) scheduled after the other
    assert order.n == 2 and order.resolution_order == (1, 0)


@pytest.mark.fuzzdist(device="cuda", world_size=2)
@pytest.mark.needs("cuda")
def test_cuda_ipc_property_catches_a_copy_instead_of_ipc(rank_pool):
    failing = []

    @settings(max_examples=100, database=None, derandomize=True, deadline=None, phases=[Phase.generate, Phase.shrink],
              report_multiple_bugs=False)
    @given(nbytes=test_cuda_ipc.NBYTES, dtype=test_cuda_ipc.DTYPES, count=st.integers(1, 3),
           src=st.integers(0, 1), writer=st.integers(0, 1), seed=st.integers(0, 2**31))
    def prop(nbytes, dtype, count, src, writer, seed):
        from fuzzdist.strategies import CudaAllocatorMode

        problems = rank_pool.run(test_cuda_ipc.ipc_write_and_see, nbytes, dtype, 0, count, src, writer, seed,
                                 CudaAllocatorMode(), receive=planted.open_cuda_handle_as_copy)
        if problems != [[], []]:
            failing.append((nbytes, dtype, count, src, writer))
            raise AssertionError(problems)

    with pytest.raises(AssertionError):
        prop()
    assert failing, "the copying receiver was never caught"
    nbytes, dtype, count, src, writer = failing[-1]
    assert nbytes == 8 and count == 1  # the smallest example already shows the copy


@pytest.mark.fuzzdist(device="cuda", world_size=2)
@pytest.mark.needs("cuda")
def test_cuda_zero_copy_property_catches_a_copy(rank_pool):
    failing = []

    @settings(max_examples=100, database=None, derandomize=True, deadline=None, phases=[Phase.generate, Phase.shrink],
              report_multiple_bugs=False)
    @given(units=st.integers(0, 4096), src=st.integers(0, 1), seed=st.integers(0, 2**31))
    def prop(units, src, seed):
        from fuzzdist.strategies import CudaAllocatorMode

        problems = rank_pool.run(test_cuda_zero_copy.zero_copy_views, units * 8, torch.float32, src, seed,
                                 CudaAllocatorMode(), as_tensor=planted.as_tensor_copying)
        if problems != [[], []]:
            failing.append(units)
            raise AssertionError(problems)

    with pytest.raises(AssertionError):
        prop()
    assert failing and failing[-1] == 1  # zero bytes have no address to compare; one unit copies
