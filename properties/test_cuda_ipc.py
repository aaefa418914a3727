"""CUDA IPC sees writes: a tensor a drawn source rank shares with ``reduce_tensor`` is the same memory on
every rank, so after a drawn writer writes and synchronizes, every rank sees exactly those values
(``fuzzdist.properties.cuda_ipc``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.properties import cuda_ipc


@pytest.mark.fuzzdist(device="cuda", world_size=[2, 4])
@pytest.mark.needs("cuda")
@given(
    data=st.data(),
    nbytes=cuda_ipc.NBYTES,
    dtype=cuda_ipc.DTYPES,
    offset=cuda_ipc.OFFSETS,
    count=cuda_ipc.COUNTS,
    seed=cuda_ipc.SEEDS,
    mode=cuda_ipc.MODES,
)
def test_cuda_ipc_sees_writes(rank_pool, data, nbytes, dtype, offset, count, seed, mode):
    """Every rank sees the writer's values exactly, for any size, offset and allocator mode."""
    ranks = fst.source_ranks(rank_pool.world_size)
    src, writer = data.draw(ranks, label="src"), data.draw(ranks, label="writer")
    cuda_ipc.check(rank_pool, nbytes, dtype, offset, count, src, writer, seed, mode)
