"""Hypothesis drives the pool: failures on any rank shrink, stay distinct and are saved."""

from __future__ import annotations

import sys

import pytest
from helpers import rank_fns
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.database import InMemoryExampleDatabase

from fuzzdist import RankError

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup


def test_failure_on_a_rank_shrinks_to_the_minimal_example(rank_pool):
    seen_failing: list[int] = []

    @settings(max_examples=300, database=None, derandomize=True, deadline=None)
    @given(n=st.integers(0, 100_000))
    def prop(n):
        try:
            rank_pool.run(rank_fns.fails_above, n, 1234, 1)
        except RankError:
            seen_failing.append(n)
            raise

    with pytest.raises(RankError) as info:
        prop()
    assert info.value.ranks == [1]
    assert seen_failing, "the planted bug was never found"
    assert seen_failing[-1] == 1234  # the example Hypothesis reports last is the shrunk one


def test_two_remote_bugs_are_two_distinct_failures(rank_pool):
    @settings(max_examples=300, database=None, derandomize=True, deadline=None, report_multiple_bugs=True)
    @given(n=st.integers(0, 1000))
    def prop(n):
        rank_pool.run(rank_fns.two_bugs, n)

    with pytest.raises(BaseExceptionGroup) as info:
        prop()
    errors = info.value.exceptions
    assert len(errors) == 2
    assert sorted(e.ranks for e in errors) == [[0], [1]]
    messages = sorted(str(e.__cause__) for e in errors)
    assert messages == ["bug A: even n on rank 0", "bug B: odd n on rank 1"]


def test_failures_are_saved_to_the_database_and_replayed(rank_pool):
    db = InMemoryExampleDatabase()
    calls: list[int] = []

    def body(n):
        calls.append(n)
        rank_pool.run(rank_fns.fails_above, n, 500, 0)

    def prop(phases):
        # Same function name both times: Hypothesis keys the database by the test.
        return settings(max_examples=200, database=db, deadline=None, phases=phases)(
            given(n=st.integers(0, 100_000))(body)
        )

    with pytest.raises(RankError):
        prop(list(Phase))()
    assert any(db.data.values()), "the failing example was not saved"

    calls.clear()
    with pytest.raises(RankError):
        prop([Phase.reuse])()
    assert calls and calls[0] == 500  # the saved, shrunk example is the first one re-run
