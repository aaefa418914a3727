"""The adaptive time schedule of ``fuzzdist run`` as pure logic, and one short campaign using it."""

from __future__ import annotations

import pytest
from helpers.cli_helpers import read_report, run_cli, write

from fuzzdist.campaign.schedule import FLOOR_EXAMPLES, SLICE_EXAMPLES, Finds, Scheduler, score


def drive(scheduler: Scheduler, finds, done=None, cost=None) -> list:
    """Run the schedule to its end.  A visit of ``nodeid`` costs ``cost[nodeid]`` seconds per example
    (default 0.01); it runs its grant's examples, or as many as fit in its seconds, and finds
    ``finds(nodeid, visit)`` (an int of new behaviours, or Finds)."""
    grants, visits = [], {}
    cost = cost or {}
    while (grant := scheduler.next()) is not None:
        visits[grant.nodeid] = visits.get(grant.nodeid, 0) + 1
        grants.append(grant)
        each = cost.get(grant.nodeid, 0.01)
        examples = int(grant.seconds / each + 1e-9)
        if grant.examples is not None:
            examples = min(examples, grant.examples)
        seconds = grant.seconds if grant.examples is None else examples * each
        scheduler.record(
            grant,
            seconds,
            finds(grant.nodeid, visits[grant.nodeid]),
            (done or {}).get((grant.nodeid, visits[grant.nodeid])),
            examples=examples,
        )
    return grants


def time_of(grants, nodeid: str, kind: str | None = None) -> float:
    return sum(g.seconds for g in grants if g.nodeid == nodeid and (kind is None or g.kind == kind))


def test_floors_first_in_order_each_a_number_of_examples_then_slices_to_the_property_still_finding():
    s = Scheduler(["a", "b", "c"], budget_s=60, slice_s=5)
    grants = drive(s, lambda n, v: 10 if n == "b" else 0)
    assert [(g.nodeid, g.kind, g.examples) for g in grants[:3]] == [
        ("a", "floor", FLOOR_EXAMPLES),
        ("b", "floor", FLOOR_EXAMPLES),
        ("c", "floor", FLOOR_EXAMPLES),
    ]
    assert {g.nodeid for g in grants[3:]} == {"b"}  # only b ever finds anything
    assert all(g.examples is None for g in grants[3:])  # slices are time
    assert s.share("a")["why"] == "floor 0s"  # 20 examples at 10 ms: 0.2 s
    assert s.share("b")["why"].startswith("floor 0s + ") and "for new behaviour" in s.share("b")["why"]


def test_a_slow_property_gets_its_floor_of_examples_however_slow():
    # slow: 3 s an example; a floor of seconds (the even split of half of 200 s, 33 s) would give it
    # 11 examples and the fast ones 3,300 each; a floor of examples gives each its 20.
    s = Scheduler(["fast1", "slow", "fast2"], budget_s=200, slice_s=5)
    grants = drive(s, lambda n, v: 0, cost={"slow": 3.0})
    floors = {g.nodeid: g for g in grants if g.kind == "floor"}
    assert s.share("slow")["floor_s"] == pytest.approx(FLOOR_EXAMPLES * 3.0)
    assert s.share("fast1")["floor_s"] < 1 and floors["fast2"].examples == FLOOR_EXAMPLES
    assert s._records["slow"].examples >= FLOOR_EXAMPLES


def test_a_floor_is_capped_at_an_even_split_of_the_time_left():
    # 100 s an example: its floor stops at an even split of what is left, so the floors after it still run
    s = Scheduler(["glacial", "b"], budget_s=60, slice_s=5)
    grants = drive(s, lambda n, v: 0, cost={"glacial": 100.0})
    assert grants[0].nodeid == "glacial" and grants[0].seconds == pytest.approx(30)
    assert grants[1].nodeid == "b" and grants[1].kind == "floor"


def test_a_floor_cut_by_its_time_cap_is_finished_before_any_adaptive_slice():
    # slow: 2 s an example; its first floor visit is capped at 60 / 3 = 20 s (10 examples), so the
    # cheap floors after it still run; then its floor is continued, ahead of the slices b earns.
    s = Scheduler(["slow", "b", "c"], budget_s=60, slice_s=5)
    grants = drive(s, lambda n, v: 5 if n == "b" else 0, cost={"slow": 2.0})
    assert [(g.nodeid, g.kind) for g in grants[:4]] == [
        ("slow", "floor"),
        ("b", "floor"),
        ("c", "floor"),
        ("slow", "floor"),
    ]
    assert grants[0].seconds == pytest.approx(20) and grants[3].examples == FLOOR_EXAMPLES - 10
    assert grants[3].reason.endswith(", continued")
    assert s._records["slow"].examples == FLOOR_EXAMPLES
    assert all(g.kind == "adaptive" for g in grants[4:])


def test_a_floor_continuation_that_runs_no_example_is_not_continued_again():
    s = Scheduler(["a", "b"], budget_s=100, slice_s=5)
    first = s.next()
    s.record(first, 50.0, 0, examples=3)  # cut by its cap at 3 examples
    s.record(s.next(), 0.2, 0, examples=FLOOR_EXAMPLES)  # b's floor
    again = s.next()
    assert (again.nodeid, again.kind, again.examples) == ("a", "floor", FLOOR_EXAMPLES - 3)
    s.record(again, 49.0, 0, examples=0)  # one example outlasted the whole continuation
    assert s.next().kind == "adaptive"


def test_a_property_that_already_ran_its_floor_examples_gets_no_second_floor():
    s = Scheduler(["a"], budget_s=10, slice_s=5)
    g = s.next()
    s.record(g, 0.5, 0, examples=FLOOR_EXAMPLES)
    assert s.next().kind == "adaptive"


def test_new_behaviour_is_normalised_per_property_so_variety_alone_does_not_buy_time():
    # varied: every visit reaches 10 new event values, but it knows hundreds; focused: one new value a
    # visit, of few.  Raw counts would give varied every slice; normalised, focused wins.
    assert score(Finds(behaviours=10), known_behaviours=500, known_lines=0, lines_on=False) < score(
        Finds(behaviours=1), known_behaviours=5, known_lines=0, lines_on=False
    )
    grants = drive(
        Scheduler(["varied", "focused"], budget_s=100, slice_s=2),
        lambda n, v: 300 if (n == "varied" and v == 1) else 10 if n == "varied" else 1,
    )
    assert time_of(grants, "focused", "adaptive") > time_of(grants, "varied", "adaptive")


def test_a_new_failure_scores_whole_whatever_the_property_knows():
    assert score(Finds(failures=1), 10_000, 10_000, lines_on=True) == pytest.approx(1.0)
    assert score(Finds(failures=1), 0, 0, lines_on=False) > score(Finds(behaviours=1), 0, 0, lines_on=False) / 2


def test_lines_are_the_main_signal_where_coverage_is_on_and_ignored_where_it_is_off():
    events, lines = Finds(behaviours=3), Finds(lines=3)
    assert score(lines, 10, 10, lines_on=True) > score(events, 10, 10, lines_on=True)
    assert score(lines, 10, 10, lines_on=False) == 0.0

    def finds(n, v):
        return Finds(behaviours=5) if n == "events" else Finds(lines=5)

    on = drive(Scheduler(["events", "lines"], budget_s=60, slice_s=2, lines_on=True), finds)
    assert time_of(on, "lines", "adaptive") > time_of(on, "events", "adaptive")
    off = drive(Scheduler(["events", "lines"], budget_s=60, slice_s=2), finds)
    assert time_of(off, "events", "adaptive") > time_of(off, "lines", "adaptive")


def test_a_slice_lasts_a_few_of_the_property_s_examples_and_the_cost_is_reported():
    s = Scheduler(["slow"], budget_s=1000, slice_s=1)
    grants = drive(s, lambda n, v: 1, cost={"slow": 2.0})
    adaptive = [g for g in grants if g.kind == "adaptive"]
    assert adaptive and all(g.seconds == pytest.approx(SLICE_EXAMPLES * 2.0) for g in adaptive[:-1])
    assert s.share("slow")["cost_per_example_s"] == pytest.approx(2.0)
    assert Scheduler(["x"], budget_s=10).share("x")["cost_per_example_s"] is None  # no example yet


def test_a_property_that_stops_finding_loses_its_share():
    # a finds a lot at first (a failure, then events), then nothing; b finds a little, steadily.
    grants = drive(
        Scheduler(["a", "b"], budget_s=200, slice_s=5),
        lambda n, v: (Finds(failures=1, behaviours=20) if v <= 2 else 0) if n == "a" else 1,
    )
    adaptive = "".join(g.nodeid for g in grants if g.kind == "adaptive")
    # a's rate is the highest after the floors; once its decayed rate falls below b's, b gets most slices
    # (not all: b's own normalised finds shrink as it learns more, and a's decayed rate is then a tie-breaker)
    assert adaptive[0] == "a"
    half = adaptive[len(adaptive) // 2 :]
    assert half.count("b") > 3 * half.count("a")
    assert time_of(grants, "b", "adaptive") > time_of(grants, "a", "adaptive")


def test_refinding_a_known_failure_is_not_new_behaviour():
    # a's only find is its failure in the floor (1); re-finding it later counts 0; b finds 1 per visit.
    grants = drive(
        Scheduler(["a", "b"], budget_s=40, slice_s=2),
        lambda n, v: (Finds(failures=1) if v == 1 else 0) if n == "a" else 1,
    )
    assert time_of(grants, "a", "adaptive") < time_of(grants, "b", "adaptive")


def test_ties_fall_back_to_the_least_time_then_collection_order():
    s = Scheduler(["a", "b", "c"], budget_s=30, slice_s=5)
    grants = drive(s, lambda n, v: 0)
    assert [g.nodeid for g in grants[:9]] == ["a", "b", "c", "a", "b", "c", "a", "b", "c"]
    assert all("no property is finding" in g.reason for g in grants[3:])
    assert s.share("c")["why"].startswith("floor 0s + 9s spare")  # 0.2 s floors, then 5 s slices to 29.4 s


def test_a_property_that_can_not_use_more_time_gets_no_more_slices():
    s = Scheduler(["a", "b"], budget_s=40, slice_s=5)
    grants = drive(s, lambda n, v: 100 if n == "a" else 0, done={("a", 1): "search space exhausted"})
    assert [g.nodeid for g in grants if g.nodeid == "a"] == ["a"]
    b = s.share("b")
    assert b["floor_s"] + b["spare_s"] == pytest.approx(40 - s.share("a")["floor_s"])


def test_deterministic_and_within_budget_when_visits_overrun():
    def run():
        s = Scheduler(["a", "b", "c"], budget_s=50)
        out = []
        while (g := s.next()) is not None:
            out.append((g.nodeid, g.kind, round(g.seconds, 6)))
            # shrinking overran the slice
            s.record(g, min(g.seconds, 2.0) * 1.5, {"a": 3, "b": 1, "c": 0}[g.nodeid], examples=10)
        return out

    assert run() == run()
    assert len(run()) < 50


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one property"):
        Scheduler([], budget_s=10)
    with pytest.raises(ValueError, match="decay"):
        Scheduler(["a"], budget_s=10, decay=1.0)
    with pytest.raises(ValueError, match="floor_examples"):
        Scheduler(["a"], budget_s=10, floor_examples=-1)


def test_the_campaign_hands_the_schedule_failures_behaviour_and_lines_apart():
    from fuzzdist.campaign.report import PropertyState
    from fuzzdist.campaign.runner import finds

    prop = PropertyState("p")
    prop.events["dtype: float32"] += 3
    prop.targets["size"] = 4.0
    before = finds(prop)
    prop.events["dtype: float64"] += 1
    prop.failures["origin"] = None  # only counted
    prop.target_gains += 1
    assert finds(prop, before) == Finds(failures=1, behaviours=2, lines=0)
    assert before == Finds(failures=0, behaviours=2, lines=0)


EVENTS_AND_FLAT = """
from hypothesis import event, given, strategies as st

def echo(ctx, k):
    return k

@given(k=st.integers(0, 10**9))
def test_flat(rank_pool, k):
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size

@given(k=st.integers(0, 10**9), s=st.text(alphabet="abcdefgh", max_size=4))
def test_events(rank_pool, k, s):
    event(f"s={s}")
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size
"""


def test_adaptive_campaign_gives_the_time_to_the_property_finding_events(tmp_path):
    write(tmp_path, "test_adapt.py", EVENTS_AND_FLAT)
    result = run_cli(
        [
            "run",
            "test_adapt.py",
            "--duration",
            "12s",  # both floors of 20 examples first (finished before any slice), even on a loaded machine
            "--seed",
            "3",
            "--progress",
            "plain",
            "--database",
            "db",
            "--junit",
            "j.xml",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(tmp_path / "fuzzdist-report.json")
    props = {p["nodeid"].split("::")[1]: p for p in report["properties"]}
    flat, events = props["test_flat[cpu-w2]"], props["test_events[cpu-w2]"]
    assert flat["schedule"]["why"].startswith("floor ") and "+" not in flat["schedule"]["why"]
    assert " for new behaviour (" in events["schedule"]["why"]
    assert events["visits"] > 1 and events["schedule"]["adaptive_s"] > 0
    assert flat["startup_s"] > 0  # the first property's set-up started the pool; not charged
    assert flat["warmup_s"] > 0 and events["warmup_s"] > 0  # each one's first example: not charged either
    assert "time per property (pool start-up and first example not counted):" in result.stdout
    assert (tmp_path / "j.xml").read_text().count("<testcase ") == 2  # one per property, not per visit
    for name in ("test_flat", "test_events"):  # the plain log says "done" once, after the last visit
        assert result.stdout.count(f"] done test_adapt.py::{name}[cpu-w2]: ") == 1, result.stdout
    # ...and what each earlier visit achieved, as it ends (not "0 examples" as it starts)
    visits = [line for line in result.stdout.splitlines() if "test_events[cpu-w2]: " in line and " visit of " in line]
    assert len(visits) in (events["visits"] - 1, events["visits"]), result.stdout  # the last may end at the budget
    assert "; floor visit of " in visits[0] and " new behaviour(s)" in visits[0], visits
    assert " 0 examples" not in visits[0], visits
