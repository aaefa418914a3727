"""DDP parity: DistributedDataParallel's gradients and parameters match a local model's, over gloo
or with its allreduces completing in a drawn order (``fuzzdist.properties.ddp``); on CPU, on CUDA
(several ranks sharing one GPU over gloo) and over nccl where there is one GPU per rank."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.properties import ddp


def _check(rank_pool, pg_kind, data, dtype, seed):
    config = data.draw(fst.ddp_configs(rank_pool.world_size), label="config")
    schedule = None if pg_kind in ("gloo", "nccl") else data.draw(ddp.completion_schedules(), label="schedule")
    ddp.check(rank_pool, config, dtype, seed, **ddp.pg_wrapper(pg_kind, schedule))


@pytest.mark.fuzzdist(device=["cpu", "cuda"])
@pytest.mark.parametrize("pg_kind", ddp.PG_KINDS)
@given(data=st.data(), dtype=ddp.DTYPES, seed=ddp.SEEDS)
def test_ddp_gradients_match_local(rank_pool, pg_kind, data, dtype, seed):
    """DDP's gradients and trained parameters equal a local model's on the whole batch,
    over gloo or with allreduces completing in a drawn order, and agree bitwise across ranks.
    The cuda variant puts every rank's model on GPU ``rank % device_count`` (one GPU serves all)."""
    _check(rank_pool, pg_kind, data, dtype, seed)


@pytest.mark.fuzzdist(device="cuda", backend="nccl", world_size=2)
@pytest.mark.multi_gpu(2, why="NCCL refuses two ranks on one GPU (one GPU per rank)")
@pytest.mark.parametrize("pg_kind", ddp.NCCL_PG_KINDS)
@given(data=st.data(), dtype=ddp.DTYPES, seed=ddp.SEEDS)
def test_ddp_gradients_match_local_nccl(rank_pool, pg_kind, data, dtype, seed):
    """The same over nccl, one GPU per rank: directly, or under a ReorderingProcessGroup."""
    _check(rank_pool, pg_kind, data, dtype, seed)
