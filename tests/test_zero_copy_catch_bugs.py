"""The zero-copy property can fail: each planted conversion bug is caught and shrunk to a minimal
example."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

import planted_sharing
import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from fuzzdist import RankFailure
from fuzzdist import strategies as fst

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "properties"))
import test_zero_copy  # noqa: E402

# The planted conversions go through numpy, so they get the cases a numpy interface can represent.
NUMPY_INTERFACE = (test_zero_copy.INTERFACES["cpu"][0].name,)


class Failure(NamedTuple):
    case: test_zero_copy.AliasCase
    seed: int
    outcome: Any  # the per-rank problems, or the RankFailure


def _shrunk_failure(pool, rank_fn, draw_rest, convert) -> Failure:
    """A zero-copy property with ``convert`` in place of the drawn interface. ``draw_rest(data)``
    draws the arguments after (case, seed). Returns the example Hypothesis shrank to."""
    failing: list[Failure] = []

    @settings(max_examples=300, database=None, derandomize=True, deadline=None, report_multiple_bugs=False,
              phases=(Phase.generate, Phase.shrink))  # no explain phase: it reruns the failure many times
    @given(data=st.data(), case=test_zero_copy.alias_cases("cpu", NUMPY_INTERFACE), seed=test_zero_copy.SEEDS)
    def prop(data, case, seed):
        rest = draw_rest(data)
        try:
            problems = pool.run(rank_fn, case, seed, *rest, convert=convert)
        except RankFailure as exc:
            failing.append(Failure(case, seed, exc))
            raise
        if problems != [None] * pool.world_size:
            failing.append(Failure(case, seed, problems))
            raise AssertionError(problems)

    with pytest.raises(AssertionError):
        prop()
    assert failing, "the planted bug was never caught"
    return failing[-1]


def test_catches_an_as_tensor_that_copies_one_dtype(rank_pool):
    f = _shrunk_failure(rank_pool, test_zero_copy.alias_and_check, lambda data: (),
                        planted_sharing.as_tensor_copying_float64)
    assert f.case.view_dtype == torch.float64  # only float64 is copied...
    # ...and the smallest memory that holds one: 8 contiguous bytes of any dtype, viewed as float64
    assert f.case.spec.nbytes == 8 and f.case.spec.layout == "contiguous"
    for problems in f.outcome:  # ...and every rank sees the copy: same values, other memory
        assert len(problems) == 1 and problems[0].startswith("copied: the result lives at cpu 0x")


def test_catches_an_interface_that_ignores_the_storage_offset(rank_pool):
    f = _shrunk_failure(rank_pool, test_zero_copy.alias_and_check, lambda data: (),
                        planted_sharing.as_tensor_ignoring_storage_offset)
    # the smallest view whose first element is not at the start of its storage
    assert f.case.spec == fst.TensorSpec((1,), torch.float32, layout="sliced", storage_offset=1)
    assert f.case.view_dtype == torch.float32 and f.seed == 0
    for problems in f.outcome:
        assert problems[0].startswith("copied: the result lives at cpu 0x")
        assert problems[1].startswith("values: 1 of 1 elements differ")


def test_catches_a_write_that_lands_in_a_copy_of_shared_memory(rank_pool):
    # rank 0 shares and writes, under file_descriptor (pinned: the bug doesn't depend on them, and
    # fewer choices make the search and the shrinking shorter)
    def draw_rest(data):
        return 0, 0, data.draw(test_zero_copy.SEEDS, label="write_seed"), fst.SharingStrategyMode("file_descriptor")

    f = _shrunk_failure(rank_pool, test_zero_copy.alias_shared_and_check, draw_rest,
                        planted_sharing.as_tensor_copying_float64)
    assert f.case.view_dtype == torch.float64 and f.case.spec.shape == (1,)
    # no rank's result is the shared memory, and rank 0 wrote into its private copy:
    assert len(f.outcome[0]) == 1 and f.outcome[0][0].startswith("over memory shared by rank 0: copied: ")
    assert len(f.outcome[1]) == 2 and f.outcome[1][0].startswith("over memory shared by rank 0: copied: ")
    assert f.outcome[1][1].startswith("after rank 0 wrote through its result: 1 of 1 elements differ")
