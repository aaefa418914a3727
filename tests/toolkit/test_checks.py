"""The comparison helpers properties build on: bitwise, and defined for every tensor a rank can hold."""

from __future__ import annotations

import pytest
import torch

from fuzzdist.toolkit.checks import bitwise_equal, first_difference, raw_bytes


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
    assert "1 of 3 elements differ" in (first_difference(actual, expected) or "")


def test_signed_zeros_and_nan_payloads_are_told_apart():
    assert not bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert bitwise_equal(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
