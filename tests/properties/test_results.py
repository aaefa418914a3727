"""The driver's first check of the ranks' results: a rank that reported a problem (in its observations, or as
the list of problems it returned) fails the property."""

from __future__ import annotations

import pytest

from fuzzdist.errors import PropertyFailure
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties._results import fail_on_ranks_with_problems, fail_on_reported_problems


def test_no_problem_on_any_rank_passes():
    fail_on_reported_problems([{"problems": []}, {"problems": []}], "X differs")


def test_the_ranks_with_problems_are_named_after_the_claim():
    problem = Problem(Kind.MISMATCH, "grad w", index=0, got=1.0, expected=2.0)
    results = [{"problems": []}, {"problems": [problem]}]
    with pytest.raises(PropertyFailure, match=r"^X differs on ranks \[1\]:") as raised:
        fail_on_reported_problems(results, "X differs")
    assert raised.value.results == results


def test_rank_problem_lists_that_are_all_empty_pass():
    fail_on_ranks_with_problems([None, []], "lost values")


def test_the_ranks_that_returned_problems_are_named_before_the_claim():
    problem = Problem(Kind.MISMATCH, "shard 0", index=0, got=1.0, expected=2.0)
    results = [None, [problem], [], [problem]]
    with pytest.raises(PropertyFailure, match=r"^ranks \[1, 3\] lost values:\n") as raised:
        fail_on_ranks_with_problems(results, "lost values")
    assert raised.value.results == results
