"""DDP communication hooks and gradient accumulation keep what their documentation promises
(``fuzzdist.properties.comm_hooks``): allreduce and half-precision hooks, PowerSGD, post-local SGD
with periodic model averaging, ``no_sync`` accumulation, and hooks whose futures complete in a
drawn order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist.properties import comm_hooks


@pytest.mark.fuzzdist(world_size=[2, 3])
@given(data=st.data(), dtype=comm_hooks.DTYPES, seed=comm_hooks.SEEDS)
def test_allreduce_and_half_precision_hooks(rank_pool, data, dtype, seed):
    """``allreduce_hook`` gives DDP's own gradients bitwise; the fp16/bf16 hooks and wrappers the mean
    within the half type's rounding bound, float16 overflow as infinities."""
    case = data.draw(comm_hooks.compression_cases(rank_pool.world_size), label="case")
    comm_hooks.check_compression(rank_pool, case, dtype, seed)


@pytest.mark.fuzzdist(world_size=2)
@pytest.mark.parametrize("pg_kind", comm_hooks.REORDER_KINDS)
@given(data=st.data(), dtype=comm_hooks.DTYPES, seed=comm_hooks.SEEDS)
def test_hooks_with_reordered_futures(rank_pool, pg_kind, data, dtype, seed):
    """The same contracts when the hooks' allreduces complete in a drawn order."""
    case = data.draw(comm_hooks.compression_cases(rank_pool.world_size, hooks=("allreduce", "fp16")), label="case")
    schedule = data.draw(comm_hooks.completion_schedules(), label="schedule")
    comm_hooks.check_compression(rank_pool, case, dtype, seed, pg_kind=pg_kind, schedule=schedule)


@pytest.mark.fuzzdist(world_size=[2, 3])
@given(data=st.data(), dtype=comm_hooks.DTYPES, seed=comm_hooks.SEEDS)
def test_powersgd(rank_pool, data, dtype, seed):
    """PowerSGD: vanilla allreduce before its start, the mean for uncompressed and full-rank tensors,
    error feedback's recurrence, warm-start state equal on every rank."""
    case = data.draw(comm_hooks.powersgd_cases(rank_pool.world_size), label="case")
    comm_hooks.check_powersgd(rank_pool, case, dtype, seed)


@pytest.mark.fuzzdist(world_size=[2, 3])
@given(data=st.data(), dtype=comm_hooks.DTYPES, seed=comm_hooks.SEEDS)
def test_post_local_sgd(rank_pool, data, dtype, seed):
    """Post-local SGD: global gradients before the start, then each rank its own, parameters averaged
    every ``period`` steps, as a local simulation of the replicas says."""
    case = data.draw(comm_hooks.local_sgd_cases(rank_pool.world_size), label="case")
    comm_hooks.check_local_sgd(rank_pool, case, dtype, seed)


@pytest.mark.fuzzdist(world_size=[2, 3])
@given(data=st.data(), dtype=comm_hooks.DTYPES, seed=comm_hooks.SEEDS)
def test_no_sync_accumulation(rank_pool, data, dtype, seed):
    """k micro-batches under ``no_sync`` then a synced backward equal one backward over the
    concatenated batch."""
    config = data.draw(comm_hooks.no_sync_configs(rank_pool.world_size), label="config")
    comm_hooks.check_no_sync(rank_pool, config, dtype, seed)
