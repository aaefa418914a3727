"""The GPU properties can fail: planted bugs caught on a real GPU (skipped without one)."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted, planted_pg
from helpers.minimal import minimal_failure
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.properties import block_stream, cuda_ipc, cuda_zero_copy, ddp
from fuzzdist.strategies import CudaAllocatorMode


@pytest.mark.fuzzdist(device="cuda", world_size=1)
@pytest.mark.needs("cuda", "block_current_stream")
def test_blocked_stream_property_catches_early_release(rank_pool):
    f = minimal_failure(
        partial(block_stream.check, rank_pool, make_work=planted.early_release_work), order=block_stream.ORDERS
    )
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


@pytest.mark.fuzzdist(device="cuda", world_size=1)
@pytest.mark.needs("cuda", "block_current_stream")
def test_blocked_stream_property_catches_a_work_that_does_not_block(rank_pool):
    f = minimal_failure(
        partial(block_stream.check, rank_pool, make_work=planted.only_first_work_blocks), order=block_stream.ORDERS
    )
    # The minimum is TWO Works completed in order: with one, the only Work really blocks.  With two,
    # completing Work 0 lifts the only real block while Work 1 is still unresolved, so the next poll
    # sees the event done: in-order completion, the simplest order, already shows it.
    assert f.order.n == 2 and f.order.steps == (("complete", 0), ("complete", 1)), f.order
    assert "stream ran on before step complete 1 with Works [1] unresolved" in str(f.error)


@pytest.mark.fuzzdist(device="cuda", world_size=2)
@pytest.mark.needs("cuda")
def test_cuda_ipc_property_catches_a_copy_instead_of_ipc(rank_pool):
    f = minimal_failure(
        partial(cuda_ipc.check, rank_pool, receive=planted.open_cuda_handle_as_copy),
        nbytes=cuda_ipc.NBYTES,
        dtype=cuda_ipc.DTYPES,
        offset=st.just(0),
        count=st.integers(1, 3),
        src=st.integers(0, 1),
        writer=st.integers(0, 1),
        seed=st.integers(0, 2**31),
        mode=st.just(CudaAllocatorMode()),
    )
    assert f.nbytes == 8 and f.count == 1  # the smallest example already shows the copy


@pytest.mark.fuzzdist(device="cuda", world_size=2)
@pytest.mark.needs("cuda")
def test_cuda_zero_copy_property_catches_a_copy(rank_pool):
    def check(units, src, seed):
        cuda_zero_copy.check(
            rank_pool, units * 8, torch.float32, src, seed, CudaAllocatorMode(), as_tensor=planted.as_tensor_copying
        )

    f = minimal_failure(check, units=st.integers(0, 4096), src=st.integers(0, 1), seed=st.integers(0, 2**31))
    assert f.units == 1  # zero bytes have no address to compare; one unit copies


# DDP parity on CUDA: the planted groups of test_ddp_parity_catch_bugs.py, under DDP with
# the model on the rank's GPU.  Their bugs depend on bucket sizes and completion order, not on the device, so
# the minimal examples are expected to be the CPU ones; a different minimum on a GPU is itself a finding.


@pytest.mark.fuzzdist(device="cuda", world_size=2)
def test_ddp_parity_on_cuda_catches_a_corrupted_large_bucket(rank_pool):
    """Several ranks on one GPU over gloo: a group that corrupts allreduces of 8 or more elements."""

    def check(config, dtype, seed):
        ddp.check(rank_pool, config, dtype, seed, wrap=planted_pg.CorruptingLargeAllreducePG, wrap_args=(8,))

    f = minimal_failure(check, config=fst.ddp_configs(2), dtype=ddp.DTYPES, seed=ddp.SEEDS)
    # the smallest model whose single bucket reaches 8 elements: one layer 1 -> 4 (4 weights + 4 biases)
    assert f.config == fst.DDPConfig(widths=(1, 4), batch_sizes=(1, 1)), f.config
    assert "step 0 grad layers.0.bias: 1 of 4 elements differ" in str(f.error)


@pytest.mark.fuzzdist(device="cuda", world_size=2)
def test_ddp_parity_on_cuda_catches_a_fifo_completion_assumption_through_device_futures(rank_pool):
    """A ReorderingProcessGroup over CUDA tensors (device-aware futures) that puts each result into the
    oldest pending allreduce: wrong only when the drawn schedule reorders two allreduces."""

    def check(config, dtype, seed, schedule):
        ddp.check(
            rank_pool,
            config,
            dtype,
            seed,
            wrap=planted_pg.FifoCompletionPG,
            wrap_args=(schedule,),
            wrap_kwargs={"ops": ("allreduce",)},
        )

    f = minimal_failure(
        check, config=fst.ddp_configs(2), dtype=ddp.DTYPES, seed=ddp.SEEDS, schedule=ddp.completion_schedules()
    )
    # two allreduces in flight, released second-first: the bucket, then the map of used parameters
    assert f.schedule.resolution_order == (1, 0), f.schedule
    assert f.config == fst.DDPConfig(widths=(1, 1), batch_sizes=(1, 1), find_unused_parameters=True), f.config
    assert "got 2, expected" in str(f.error)
