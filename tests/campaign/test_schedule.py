"""The adaptive time schedule of ``fuzzdist run`` as pure logic, and one short campaign using it."""

from __future__ import annotations

import pytest
from helpers.cli_helpers import read_report, run_cli, write

from fuzzdist.campaign.schedule import Scheduler


def drive(scheduler: Scheduler, finds, done=None) -> list:
    """Run the schedule to its end; each visit takes exactly its grant and finds ``finds(nodeid, visit)``."""
    grants, visits = [], {}
    while (grant := scheduler.next()) is not None:
        visits[grant.nodeid] = visits.get(grant.nodeid, 0) + 1
        grants.append(grant)
        scheduler.record(grant, grant.seconds, finds(grant.nodeid, visits[grant.nodeid]),
                         (done or {}).get((grant.nodeid, visits[grant.nodeid])))
    return grants


def time_of(grants, nodeid: str, kind: str | None = None) -> float:
    return sum(g.seconds for g in grants if g.nodeid == nodeid and (kind is None or g.kind == kind))


def test_floors_first_in_order_then_the_property_still_finding_gets_the_slices():
    s = Scheduler(["a", "b", "c"], budget_s=60, slice_s=5)
    grants = drive(s, lambda n, v: 10 if n == "b" else 0)
    assert [(g.nodeid, g.kind) for g in grants[:3]] == [("a", "floor"), ("b", "floor"), ("c", "floor")]
    assert [g.seconds for g in grants[:3]] == [10, 10, 10]  # half of 60 s, split evenly
    assert {g.nodeid for g in grants[3:]} == {"b"}  # only b ever finds anything
    assert time_of(grants, "b") == pytest.approx(40)
    assert sum(g.seconds for g in grants) == pytest.approx(60)
    assert s.share("b")["why"] == "floor 10s + 30s for new behaviour (60 found in it)"
    assert s.share("a")["why"] == "floor 10s"


def test_floor_is_kept_even_for_a_property_that_finds_nothing():
    grants = drive(Scheduler(["a", "b"], budget_s=100, floor_fraction=0.3, slice_s=10),
                   lambda n, v: 50 if n == "a" else 0)
    assert time_of(grants, "b", "floor") == pytest.approx(15)
    assert time_of(grants, "a") == pytest.approx(85)


def test_a_property_that_stops_finding_loses_its_share():
    # a finds a lot at first (a failure, then events), then nothing; b finds a little, steadily.
    grants = drive(Scheduler(["a", "b"], budget_s=200, slice_s=5),
                   lambda n, v: (20 if v <= 2 else 0) if n == "a" else 1)
    adaptive = "".join(g.nodeid for g in grants if g.kind == "adaptive")
    # a's rate is the highest after the floors; once its decayed rate falls below b's, b gets every slice
    assert adaptive == "a" * adaptive.count("a") + "b" * adaptive.count("b")
    assert adaptive.count("a") >= 1 and adaptive.count("b") >= 5
    assert time_of(grants, "b", "adaptive") > time_of(grants, "a", "adaptive")


def test_refinding_a_known_failure_is_not_new_behaviour():
    # a's only find is its failure in the floor (1); re-finding it later counts 0; b finds 1 per visit.
    grants = drive(Scheduler(["a", "b"], budget_s=40, slice_s=2), lambda n, v: (1 if v == 1 else 0) if n == "a" else 1)
    assert time_of(grants, "a", "adaptive") < time_of(grants, "b", "adaptive")


def test_ties_fall_back_to_the_least_time_then_collection_order():
    s = Scheduler(["a", "b", "c"], budget_s=30, slice_s=5)
    grants = drive(s, lambda n, v: 0)
    assert [g.nodeid for g in grants] == ["a", "b", "c", "a", "b", "c"]
    assert all("no property is finding" in g.reason for g in grants[3:])
    assert s.share("c")["why"].startswith("floor 5s + 5s spare")


def test_a_property_that_can_not_use_more_time_gets_no_more_slices():
    grants = drive(Scheduler(["a", "b"], budget_s=40, slice_s=5), lambda n, v: 100 if n == "a" else 0,
                   done={("a", 1): "search space exhausted"})
    assert [g.nodeid for g in grants if g.nodeid == "a"] == ["a"]
    assert time_of(grants, "b") == pytest.approx(30)


def test_deterministic_and_within_budget_when_visits_overrun():
    def run():
        s = Scheduler(["a", "b", "c"], budget_s=50)
        out = []
        while (g := s.next()) is not None:
            out.append((g.nodeid, g.kind, round(g.seconds, 6)))
            s.record(g, g.seconds * 1.5, {"a": 3, "b": 1, "c": 0}[g.nodeid])  # shrinking overran the slice
        return out
    assert run() == run()
    assert len(run()) < 50


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one property"):
        Scheduler([], budget_s=10)
    with pytest.raises(ValueError, match="decay"):
        Scheduler(["a"], budget_s=10, decay=1.0)


EVENTS_AND_FLAT = '''
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
'''


def test_adaptive_campaign_gives_the_time_to_the_property_finding_events(tmp_path):
    write(tmp_path, "test_adapt.py", EVENTS_AND_FLAT)
    result = run_cli(["run", "test_adapt.py", "--duration", "5s", "--seed", "3", "--progress", "plain",
                      "--database", "db", "--junit", "j.xml"], cwd=tmp_path)
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
