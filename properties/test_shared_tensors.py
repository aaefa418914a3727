"""Shared tensors see writes: a CPU tensor one rank shares the way torch does across processes is one
piece of memory: every rank sees its layout, its values and every rank's write, and holds none of it
after the example (``fuzzdist.properties.shared_tensors``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.properties import shared_tensors as shared


@pytest.mark.fuzzdist(world_size=[2, 3])  # 3 ranks: two receivers, each needing its own handle
@given(
    data=st.data(),
    spec=shared.SPECS,
    seed=shared.SEEDS,
    mode=shared.MODES,
    write_pattern=shared.WRITE_PATTERNS,
    write_seed=shared.SEEDS,
)
def test_shared_tensors_see_writes(rank_pool, data, spec, seed, mode, write_pattern, write_seed):
    """Each rank sees the shared tensor's layout and values, then every rank's write, whatever
    the dtype, layout, storage offset, source, writers and sharing strategy. No rank still holds
    shared memory after the example."""
    src = data.draw(fst.source_ranks(rank_pool.world_size), label="src")
    writers = data.draw(fst.rank_subsets(rank_pool.world_size), label="writers")
    shared.check(rank_pool, spec, seed, src, writers, write_pattern, write_seed, mode)
