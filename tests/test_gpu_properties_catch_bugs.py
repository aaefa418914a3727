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
    # The minimum is ONE Work, completed in order.  Why: the planted Work 0's future is resolved at
    # creation, before check_blocked_stream calls its block_current_stream().  torch's
    # Work::blockCurrentStream (torch/csrc/distributed/c10d/Work.cpp) blocks the stream, then adds
    # `handle->abort()` as a callback on getFuture(); on a future that is already complete,
    # addCallback runs the callback at once, so the block is lifted as soon as it is made.  The
    # property's first poll (before any step) then finds the event past the block while it still
    # counts Work 0 as unresolved, whatever the order's steps are.  So n == 1 already fails, and
    # Hypothesis shrinks the steps to completion_orders' minimum: ("complete", 0).
    assert f.order.n == 1 and f.order.steps == (("complete", 0),), f.order
    assert "stream ran on before step complete 0 with Works [0] unresolved" in str(f.error)


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
