"""How known torch bugs are reported: pytest's KNOWN status and summary, and ``fuzzdist run``'s
report and summary.  The properties here plant a "known bug" of their own (registered by the test
file), so nothing depends on which torch bugs the installed torch has."""

from __future__ import annotations

from helpers.cli_helpers import read_report, run_cli, write

PLANTED = """
from hypothesis import given, settings, strategies as st

from fuzzdist import known_bugs
from fuzzdist.errors import PropertyFailure

known_bugs.register(known_bugs.KnownBug(
    id="planted-odd-fails", summary="a planted known bug: odd n fails with 'odd'", where=("planted",),
    recognise=lambda ex, f: isinstance(f, PropertyFailure) and ex["n"] % 2 == 1 and "odd" in str(f),
    seen_on=("2.13",)))


def check(n, message="odd"):
    with known_bugs.known_failures("planted", n=n):
        if n % 2:
            raise PropertyFailure(message)
"""

PYTEST_FILE = (
    PLANTED
    + """

@settings(max_examples=20, database=None)
@given(n=st.integers(0, 100))
def test_only_known(n):
    check(n)


def test_passes():
    check(2)


def test_known_and_a_new_failure():
    check(1)
    assert False, "a new failure"


def test_same_inputs_other_symptom():
    check(3, message="garbage")
"""
)


def test_pytest_reports_known_tests_apart_from_passes_and_failures(pytester):
    pytester.makepyfile(test_planted=PYTEST_FILE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")  # a fresh registry
    assert result.parseoutcomes() == {"passed": 1, "failed": 2, "known": 1}
    result.stdout.fnmatch_lines(["*2 failed, 1 passed, 1 known*"])
    out = result.stdout.str()
    assert "test_planted.py::test_only_known: KNOWN" in out  # the end-of-run section
    assert "KNOWN planted-odd-fails x" in out
    assert "test_planted.py::test_known_and_a_new_failure: FAILED" in out
    # the failure shows its sightings with it
    assert "- fuzzdist: known torch bugs -" in out and "a new failure" in out
    assert "garbage" in out  # the other symptom failed as itself
    assert result.ret == 1


def test_a_test_with_only_sightings_exits_0(pytester):
    pytester.makepyfile(test_planted=PYTEST_FILE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "only_known or passes", "-v")
    assert result.parseoutcomes() == {"passed": 1, "known": 1, "deselected": 2}
    result.stdout.fnmatch_lines(["*test_only_known KNOWN*"])
    assert result.ret == 0


CAMPAIGN_FILE = (
    PLANTED
    + """

def echo(ctx, n):
    return n


@given(n=st.integers(0, 10**6))
def test_known(rank_pool, n):
    rank_pool.run(echo, n)
    check(n)


@given(n=st.integers(0, 10**6))
def test_clean(rank_pool, n):
    rank_pool.run(echo, n)
"""
)


def test_campaign_report_counts_known_sightings_per_property(tmp_path):
    write(tmp_path, "test_known.py", CAMPAIGN_FILE)
    result = run_cli(
        ["run", "test_known.py", "--max-examples", "20", "--world-size", "1", "--report", "r.json"], cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr  # sightings are not failures
    report = read_report(tmp_path / "r.json")
    props = {p["nodeid"].rsplit("::", 1)[1]: p for p in report["properties"]}
    known, clean = props["test_known[cpu-w1]"], props["test_clean[cpu-w1]"]
    assert known["status"] == "known" and known["failures"] == []
    assert 0 < known["known_sightings"] <= known["examples"]
    [bug] = known["known_bugs"]
    assert bug["id"] == "planted-odd-fails" and bug["count"] == known["known_sightings"]
    assert clean["status"] == "passed" and clean["known_sightings"] == 0 and clean["known_bugs"] == []
    totals = report["totals"]
    assert totals["known_sightings"] == known["known_sightings"] and totals["known_bugs"] == ["planted-odd-fails"]
    assert totals["distinct_failures"] == 0 and totals["properties_with_known_bugs"] == 1
    assert "sighting(s) of known torch bugs" in result.stdout
    assert "KNOWN planted-odd-fails x" in result.stdout
