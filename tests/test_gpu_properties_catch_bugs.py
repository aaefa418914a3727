"""The GPU properties can fail: planted bugs caught on a real GPU (skipped without one)."""

from __future__ import annotations

from functools import partial

import planted
import pytest
import torch
from hypothesis import strategies as st
from minimal import minimal_failure

from fuzzdist.properties import block_stream, cuda_ipc, cuda_zero_copy
from fuzzdist.strategies import CudaAllocatorMode


@pytest.mark.fuzzdist(device="cuda", world_size=1)
@pytest.mark.needs("cuda", "block_current_stream")
def test_blocked_stream_property_catches_early_release(rank_pool):
    f = minimal_failure(partial(block_stream.check, rank_pool, make_work=planted.early_release_work),
                        order=block_stream.ORDERS)
    # smallest exposing schedule: two Works, the early one (0) scheduled after the other
    assert f.order.n == 2 and f.order.resolution_order == (1, 0)


@pytest.mark.fuzzdist(device="cuda", world_size=2)
@pytest.mark.needs("cuda")
def test_cuda_ipc_property_catches_a_copy_instead_of_ipc(rank_pool):
    f = minimal_failure(partial(cuda_ipc.check, rank_pool, receive=planted.open_cuda_handle_as_copy),
                        nbytes=cuda_ipc.NBYTES, dtype=cuda_ipc.DTYPES, offset=st.just(0), count=st.integers(1, 3),
                        src=st.integers(0, 1), writer=st.integers(0, 1), seed=st.integers(0, 2**31),
                        mode=st.just(CudaAllocatorMode()))
    assert f.nbytes == 8 and f.count == 1  # the smallest example already shows the copy


@pytest.mark.fuzzdist(device="cuda", world_size=2)
@pytest.mark.needs("cuda")
def test_cuda_zero_copy_property_catches_a_copy(rank_pool):
    def check(units, src, seed):
        cuda_zero_copy.check(rank_pool, units * 8, torch.float32, src, seed, CudaAllocatorMode(),
                             as_tensor=planted.as_tensor_copying)

    f = minimal_failure(check, units=st.integers(0, 4096), src=st.integers(0, 1), seed=st.integers(0, 2**31))
    assert f.units == 1  # zero bytes have no address to compare; one unit copies
