"""The compile family's driver-side reading of the ranks' outcomes: graph breaks as events, problems as a failure."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties.compile import outcomes as outcomes_module
from fuzzdist.properties.compile.outcomes import fail_on_rank_problems, report_graph_breaks


@dataclass(frozen=True)
class _Outcome:
    problems: tuple[Problem, ...]
    breaks: tuple[str, ...]


def test_ranks_with_problems_are_named_and_every_rank_is_carried():
    problem = Problem(Kind.MISMATCH, "grad w", got=1.0, expected=2.0)
    ranks = [_Outcome((), ()), _Outcome((problem,), ())]
    with pytest.raises(PropertyFailure, match=r"^compiled X differs on ranks \[1\]:") as raised:
        fail_on_rank_problems(ranks, "compiled X differs")
    assert raised.value.results == [None, [problem]]
    fail_on_rank_problems([_Outcome((), ("a break",))], "never raised")


def test_each_distinct_break_is_one_event_of_its_first_line_outside_a_test_none(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(outcomes_module, "event", seen.append)
    ranks = [_Outcome((), ("b reason\nmore", "a" * 200)), _Outcome((), ("b reason\nmore",))]
    report_graph_breaks(ranks, "compile x")
    assert seen == []  # not inside a Hypothesis test

    @settings(max_examples=1, database=None)
    @given(st.just(None))
    def inside(_):
        report_graph_breaks(ranks, "compile x")

    inside()
    assert seen == [f"compile x: graph break: {'a' * 120}", "compile x: graph break: b reason"]
