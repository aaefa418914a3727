"""Zero-copy stays zero-copy on CUDA: ``torch.as_tensor`` over ``__cuda_array_interface__`` (the seed
test's wrapper, and real cupy arrays in a test of their own) and DLPack give a tensor with the same
``data_ptr`` and values, also over memory shared from another rank (``fuzzdist.properties.cuda_zero_copy``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.properties import cuda_zero_copy


@pytest.mark.fuzzdist(device="cuda")
@pytest.mark.needs("cuda")
@given(
    data=st.data(),
    view_dtype=st.sampled_from(cuda_zero_copy.VIEW_DTYPES),
    units=cuda_zero_copy.UNITS,
    seed=cuda_zero_copy.SEEDS,
    mode=cuda_zero_copy.MODES,
)
def test_cuda_zero_copy(rank_pool, data, view_dtype, units, seed, mode):
    """The seed's ``__cuda_array_interface__`` wrapper (both device spellings) and DLPack view the
    shared memory itself (same data_ptr) with the same values.  The cupy cases are
    ``test_cuda_zero_copy_cupy``."""
    nbytes = units * 8  # a multiple of every view dtype's size
    src = data.draw(fst.source_ranks(rank_pool.world_size), label="src")
    cuda_zero_copy.check(rank_pool, nbytes, view_dtype, src, seed, mode)


@pytest.mark.fuzzdist(device="cuda")
@pytest.mark.needs("cuda", "cupy")
@given(
    data=st.data(),
    view_dtype=st.sampled_from(cuda_zero_copy.VIEW_DTYPES),
    units=cuda_zero_copy.UNITS,
    seed=cuda_zero_copy.SEEDS,
    mode=cuda_zero_copy.MODES,
)
def test_cuda_zero_copy_cupy(rank_pool, data, view_dtype, units, seed, mode):
    """Real cupy arrays over the shared memory, through ``__cuda_array_interface__`` and DLPack, are
    that memory (same data_ptr) with the same values.  Skips, saying why, where cupy is missing,
    broken or built for another CUDA than torch's."""
    nbytes = units * 8
    src = data.draw(fst.source_ranks(rank_pool.world_size), label="src")
    cuda_zero_copy.check(rank_pool, nbytes, view_dtype, src, seed, mode, interfaces="cupy")
