"""``keyed_differences``: two name-to-tensor mappings compared key by key in the expected one's order, a
missing key and a differing tensor each one problem, named by the caller."""

from __future__ import annotations

import torch

from fuzzdist.problems import Kind
from fuzzdist.toolkit.checks import keyed_differences


def _missing(key: str) -> str:
    return f"{key} missing"


def _different(key: str) -> str:
    return f"{key} differs"


def test_equal_mappings_have_no_problem_and_extra_keys_are_not_looked_at():
    expected = {"a": torch.tensor([1.0, 2.0])}
    got = {"a": torch.tensor([1.0, 2.0]), "extra": torch.tensor([3.0])}
    assert keyed_differences(got, expected, _missing, _different) == []


def test_a_missing_key_and_a_differing_tensor_are_one_problem_each_in_expected_order():
    expected = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0]), "v": torch.tensor([5.0])}
    got = {"v": torch.tensor([5.0]), "w": torch.tensor([1.0, -2.0])}
    problems = keyed_differences(got, expected, _missing, _different)
    assert [(p.kind, p.what) for p in problems] == [(Kind.MISMATCH, "w differs"), (Kind.MISSING, "b missing")]
    assert (problems[0].index, problems[0].got, problems[0].expected) == (1, -2.0, 2.0)
