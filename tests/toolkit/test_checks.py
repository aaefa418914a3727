"""The comparison helpers properties build on: bitwise, and defined for every tensor a rank can hold."""

from __future__ import annotations

import pytest
import torch

from fuzzdist.problems import Kind, Problem
from fuzzdist.toolkit.checks import (
    bitwise_equal,
    digest,
    first_difference,
    first_disagreement,
    gradient_problem,
    layout_problem,
    mismatch,
    raw_bytes,
    tolerance_problem,
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint16, torch.complex64, torch.bool])
@pytest.mark.parametrize("numel", [0, 1])
def test_tensors_whose_stride_is_not_one_still_compare(dtype, numel):
    """A 0- or 1-element tensor counts as contiguous with any stride (``np.from_dlpack`` of an
    empty array gives stride 0): found by a campaign, where raw_bytes raised instead of comparing."""
    odd = torch.zeros(numel, dtype=dtype).as_strided((numel,), (0,))
    plain = torch.zeros(numel, dtype=dtype)
    assert odd.is_contiguous() and odd.stride() == (0,)
    assert raw_bytes(odd) == raw_bytes(plain) == bytes(numel * plain.element_size())
    assert bitwise_equal(odd, plain) and first_difference(odd, plain) is None


def test_a_differing_byte_is_found():
    expected = torch.tensor([1.0, 2.0, 3.0])
    actual = expected.clone()
    actual[2] = -3.0
    assert not bitwise_equal(actual, expected)
    found = first_difference(actual, expected, "output")
    assert found == Problem(Kind.MISMATCH, "output", index=2, got=-3.0, expected=3.0, count=1, size=3)
    assert str(found) == "output: 1 of 3 elements differ; first at flat index 2: got -3.0, expected 3.0"


def test_a_shape_or_dtype_difference_is_a_shape_problem():
    found = first_difference(torch.zeros(2, dtype=torch.int32), torch.zeros(3))
    assert found is not None and found.kind is Kind.SHAPE
    assert (found.got, found.expected) == (((2,), "torch.int32"), ((3,), "torch.float32"))
    assert str(found) == "got shape (2,) torch.int32, expected (3,) torch.float32"


def test_mismatch_reports_the_first_or_the_worst_element_and_its_bound():
    actual, expected = torch.tensor([1.5, 0.0, 9.0]), torch.tensor([1.0, 0.0, 1.0])
    error = (actual - expected).abs()
    bad = error > 0.25
    first = mismatch("grad w", actual, expected, bad, 0.25)
    worst = mismatch("grad w", actual, expected, bad, torch.full((3,), 0.25), error)
    assert first is not None and (first.index, first.count, first.bound, first.worst) == (0, 2, 0.25, False)
    assert worst is not None and (worst.index, worst.got, worst.worst) == (2, 9.0, True)
    assert str(worst) == "grad w: 2 of 3 elements differ; worst at flat index 2: got 9, expected 1 within 0.25"
    assert mismatch("grad w", actual, expected, torch.zeros(3, dtype=torch.bool)) is None


def test_a_layout_problem_names_both_shapes_and_dtypes_or_is_none():
    assert layout_problem("param w", torch.zeros(2, 3), torch.ones(2, 3)) is None
    found = layout_problem("param w", torch.zeros(2, dtype=torch.float64), torch.zeros(2))
    assert found == Problem(Kind.SHAPE, "param w", got=((2,), "torch.float64"), expected=((2,), "torch.float32"))


def test_a_tolerance_problem_shows_the_first_element_beyond_its_bound_in_float64():
    expected = torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)
    actual = torch.tensor([1.0, 2.5, 4.0], dtype=torch.bfloat16)
    assert tolerance_problem("p", expected.clone(), expected, 0.01, 0.0) is None
    found = tolerance_problem("p", actual, expected, 0.01, 1e-3)
    assert found is not None and (found.kind, found.index, found.count, found.worst) == (Kind.MISMATCH, 1, 2, False)
    assert found.bound == 1e-3 + 0.01 * 2.0  # computed in float64, not rounded to bfloat16
    shape = tolerance_problem("p", actual[:2], expected, 0.01, 1e-3)
    assert shape is not None and shape.kind is Kind.SHAPE


def test_the_worst_element_of_a_tolerance_problem_is_one_beyond_its_bound():
    """The element farthest off, 5 from 10000, is within its bound (rtol 1e-3 of 10000); the one shown is
    the element beyond, 1 from 1."""
    expected = torch.tensor([1e4, 1.0], dtype=torch.float64)
    actual = torch.tensor([1e4 + 5, 2.0], dtype=torch.float64)
    found = tolerance_problem("grad w", actual, expected, 1e-3, 0.0, worst=True)
    assert found is not None and (found.index, found.got, found.expected, found.count) == (1, 2.0, 1.0, 1)
    assert found.worst and found.bound == 1e-3


def test_digest_is_equal_only_for_bitwise_equal_tensors():
    same = digest({"w": torch.tensor([0.0, 1.0]), "b": None})
    assert same == digest({"w": torch.tensor([0.0, 1.0]), "b": None})
    assert same != digest({"w": torch.tensor([-0.0, 1.0]), "b": None})
    assert same != digest({"w": torch.tensor([0.0, 1.0]), "b": torch.zeros(0)})


def test_signed_zeros_and_nan_payloads_are_told_apart():
    assert not bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert bitwise_equal(torch.tensor([float("nan")]), torch.tensor([float("nan")]))


def test_the_first_rank_whose_digests_part_from_rank_0s_is_named_with_where():
    assert first_disagreement([{"digests": ["a", "b"]}, {"digests": ["a", "b"]}]) is None
    assert first_disagreement([{"digests": ["a", "b"]}, {"digests": ["a", "b"]}, {"digests": ["a", "c"]}]) == (2, 1)


def test_a_rank_whose_digests_stop_early_disagrees_where_they_stop():
    """A list that is a prefix of rank 0's has no differing pair: the answer is where it stops, not an
    error from an exhausted search."""
    assert first_disagreement([{"digests": ["a", "b", "c"]}, {"digests": ["a"]}]) == (1, 1)


def test_a_gradient_is_checked_against_the_ranks_mean_within_its_bound():
    mean, bound = torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([0.1, 0.1], dtype=torch.float64)
    assert gradient_problem("g", torch.tensor([1.05, 2.0]), (mean, bound)) is None
    found = gradient_problem("g", torch.tensor([1.0, float("nan")]), (mean, bound))
    assert found is not None and found.kind is Kind.MISMATCH and found.index == 1
    assert gradient_problem("g", None, (mean, bound)) is not None  # None counts as zeros
    shape = gradient_problem("g", torch.zeros(3), (mean, bound))
    assert shape is not None and shape.kind is Kind.SHAPE


def test_no_rank_having_a_gradient_allows_none_or_zeros_only():
    assert gradient_problem("g", None, None) is None
    assert gradient_problem("g", torch.zeros(2), None) is None
    found = gradient_problem("g", torch.tensor([0.0, 1.0]), None)
    assert found is not None and found.kind is Kind.MISMATCH
