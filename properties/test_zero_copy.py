"""Zero-copy stays zero-copy: a tensor taken over a tensor's memory through ``__array_interface__``,
``__dlpack__`` or a DLPack capsule is that memory, with its values, whether private or shared by
another rank and reinterpreted with ``view(dtype)`` (``fuzzdist.properties.zero_copy``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.properties import zero_copy


@pytest.mark.fuzzdist(device="cpu")  # CUDA memory: test_cuda_zero_copy.py
@given(data=st.data(), seed=zero_copy.SEEDS)
def test_zero_copy_keeps_data_ptr_and_values(rank_pool, data, seed):
    """Through every interface, for every dtype it can represent, every layout and any legal
    view(dtype), including zero-size tensors: the result is the tensor's own memory, at its
    data_ptr, with its shape, dtype and values."""
    case = data.draw(zero_copy.alias_cases(rank_pool.device), label="case")
    zero_copy.check(rank_pool, case, seed)


@pytest.mark.fuzzdist(device="cpu")  # CUDA memory: test_cuda_zero_copy.py
@given(data=st.data(), seed=zero_copy.SEEDS, write_seed=zero_copy.SEEDS, mode=fst.allocator_modes("cpu"))
def test_zero_copy_of_shared_memory(rank_pool, data, seed, write_seed, mode):
    """Over memory another rank shared (either sharing strategy), reinterpreted with a legal
    view(dtype): the result is the shared memory itself, and a write through one rank's result is
    seen through every rank's."""
    case = data.draw(zero_copy.alias_cases(rank_pool.device), label="case")
    src = data.draw(fst.source_ranks(rank_pool.world_size), label="src")
    writer = data.draw(fst.source_ranks(rank_pool.world_size), label="writer")
    zero_copy.check_shared(rank_pool, case, seed, src, writer, write_seed, mode)
