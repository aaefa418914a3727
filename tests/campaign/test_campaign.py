"""``fuzzdist run``: finds distinct failures and keeps looking, respects its budget, loses nothing.

Each test writes a throwaway property file and runs the command in a subprocess.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from helpers import flight_record
from helpers.cli_helpers import (
    cli_env,
    finish,
    read_report,
    redis_server,
    run_cli,
    start_cli,
    stored,
    wait_for_report,
    write,
)

TWO_BUGS = """
import pytest
from hypothesis import event, given, strategies as st

def check(ctx, n):
    if n >= 1000 and ctx.rank == ctx.world_size - 1:
        raise ValueError(f"planted bug A: n={n}")

# Bug A fails about half the examples; bug B about one in fifty, independently.
@given(n=st.integers(0, 10**6), k=st.integers(0, 49), s=st.text(alphabet="ab", max_size=5))
def test_two_bugs(rank_pool, n, k, s):
    event(f"len={len(s)}")
    assert k != 37, "planted bug B"
    rank_pool.run(check, n)

# Only bug A, on almost every example.
@given(n=st.integers(0, 10**6))
def test_one_bug(rank_pool, n):
    rank_pool.run(check, n + 1000)
"""

PASSING = """
from hypothesis import given, strategies as st

def echo(ctx, k):
    return k

@given(k=st.integers(0, 10**9))
def test_passes(rank_pool, k):
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size
"""

# Bug A shows on most inputs; the campaign then goes on (masking it) until stopped.
ONE_BUG = """
from hypothesis import given, strategies as st

def check(ctx, n):
    if n >= 10:
        raise ValueError(f"planted: n={n}")

@given(n=st.integers(0, 10**9))
def test_bug(rank_pool, n):
    rank_pool.run(check, n)
"""


def test_campaign_finds_both_planted_bugs_reports_and_pytest_replays_them(tmp_path):
    write(tmp_path, "test_two.py", TWO_BUGS)
    result = run_cli(
        ["run", "test_two.py", "--max-examples", "600", "--world-size", "1", "--report", "r.json", "--junit", "j.xml"],
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    report = read_report(tmp_path / "r.json")
    assert report["status"] == "finished" and report["totals"]["distinct_failures"] == 3
    prop, one = report["properties"]
    assert prop["nodeid"] == "test_two.py::test_two_bugs[cpu-w1]" and prop["status"] == "failed"
    failures = {("A" if "planted bug A" in f["summary"] else "B"): f for f in prop["failures"]}
    assert set(failures) == {"A", "B"}, [f["summary"] for f in prop["failures"]]
    assert all(f["shrunk"] and f["kind"] == "failure" for f in failures.values())
    assert re.search(r"\bn=1000\b", failures["A"]["example"]), failures["A"]["example"]  # shrunk
    assert "k=37" in failures["B"]["example"], failures["B"]["example"]
    # Once a bug is known, later rounds count it as a pass: Hypothesis would otherwise re-find
    # it within a few examples, stop generating and shrink it again, round after round (with
    # that, test_one_bug takes a dozen rounds to spend its budget instead of 2).
    assert one["rounds"] == 2 and one["stop_reason"] == "max examples" and len(one["failures"]) == 1, one
    assert "ValueError at" in failures["A"]["origin"] and "test_two.py:7" in failures["A"]["origin"]
    assert failures["B"]["origin"].startswith("AssertionError at") and "test_two.py:13" in failures["B"]["origin"]
    assert failures["A"]["reproduce"] == (
        "pytest 'test_two.py::test_two_bugs[cpu-w1]' --fuzzdist-world-size=1 --hypothesis-profile=replay"
    )
    # What was covered: the property's event() labels, counted per example.
    assert set(prop["events"]) == {f"len={i}" for i in range(6)}
    assert sum(prop["events"].values()) == prop["examples"] >= 600
    # The summary names both failures; the JUnit file has the failing property.
    assert "3 distinct failure(s)" in result.stdout and "planted bug B" in result.stdout
    case = ET.parse(tmp_path / "j.xml").getroot().find(".//testcase")
    assert case.get("name") == "test_two_bugs[cpu-w1]"
    assert "2 distinct failure(s)" in case.find("failure").get("message")
    # Both shrunk examples are in Hypothesis's default database under the standard key ...
    assert len(stored(tmp_path / ".hypothesis" / "examples", prop["database_key"])) >= 2
    # ... so plain pytest replays them first: both fail in the reuse phase, nothing is generated.
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_two.py::test_two_bugs",
            "-p",
            "no:cacheprovider",
            "--fuzzdist-world-size=1",
            "--hypothesis-show-statistics",
        ],
        cwd=tmp_path,
        env=cli_env(),
        text=True,
        capture_output=True,
        timeout=180,
    )
    assert plain.returncode == 1, plain.stdout
    assert "Hypothesis found 2 distinct failures" in plain.stdout
    assert "n=1000" in plain.stdout and "k=37" in plain.stdout
    assert re.search(r"during reuse phase.*\n.*\n\s*- 0 passing, 2 failing", plain.stdout), plain.stdout
    assert "during generate phase" not in plain.stdout


DEADLOCK = """
import torch
import torch.distributed as dist
from hypothesis import given, strategies as st

def skip_above(ctx, n):
    t = torch.ones(2)
    dist.all_reduce(t)
    if ctx.rank == 0 and n > 5 and n % 3 == 0:
        dist.all_reduce(t)  # rank 1 never joins

@given(n=st.integers(0, 100))
def test_deadlock(rank_pool, n):
    rank_pool.run(skip_above, n)
"""


def test_a_hang_is_explained_in_the_report_the_summary_and_replay(tmp_path):
    flight_record.skip_without_gloo_record()  # every hang would wait out the timeout, none a deadlock
    write(tmp_path, "test_dl.py", DEADLOCK)
    # Every hang costs a pool restart (seconds): a bug on a third of the inputs and a small budget.
    result = run_cli(
        ["run", "test_dl.py", "--max-examples", "30", "--world-size", "2", "--timeout", "30", "--report", "r.json"],
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    [prop] = read_report(tmp_path / "r.json")["properties"]
    [failure] = prop["failures"]
    n = int(re.search(r"\bn=(\d+)", failure["example"]).group(1))
    assert failure["shrunk"] and n > 5 and n % 3 == 0, failure["example"]
    hang = failure["hang"]
    assert hang["kind"] == "MissedCollective" and hang["deadlock"]
    assert hang["summary"].startswith("rank 0 waits in all_reduce #2 (float32[2]) which rank 1 never entered")
    assert hang["site"].endswith("test_dl.py:10 in skip_above")
    assert "why it hung (MissedCollective): rank 0 waits in all_reduce #2" in result.stdout
    # Declared at once: shrinking hit the deadlock several times without paying the 30 s timeout.
    assert prop["elapsed_s"] < 120, prop
    replay = run_cli(["replay", "test_dl.py"], cwd=tmp_path)
    assert "deadlock: rank 0 waits in all_reduce #2 (float32[2]) which rank 1 never entered" in replay.stdout, (
        replay.stdout + replay.stderr
    )


def test_passing_property_exits_0_and_duration_is_respected(tmp_path):
    write(tmp_path, "test_ok.py", PASSING)
    start = time.monotonic()
    result = run_cli(
        ["run", "test_ok.py", "--duration", "3s", "--world-size", "1", "--report", "r.json", "--junit", "j.xml"],
        cwd=tmp_path,
    )
    wall = time.monotonic() - start
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(tmp_path / "r.json")
    [prop] = report["properties"]
    assert report["status"] == "finished" and prop["status"] == "passed"
    assert prop["stop_reason"] == "time budget" and prop["failures"] == []
    # The budget counts from the first example; one example takes milliseconds, so the
    # property stops well within a second of it.  Its elapsed time is the sum of its visits (the
    # adaptive schedule's slices): the campaign's own work between two visits (milliseconds: the
    # report, the next slice) is charged to no property, so it may fall short of 3 s by that much.
    assert 3.0 - 0.25 <= prop["elapsed_s"] <= 3.0 + 1.0, prop
    assert prop["examples"] > 0
    # Stopping mid-run saved nothing: Hypothesis files the example in flight as a failure
    # unless the stop is a KeyboardInterrupt.
    assert stored(tmp_path / ".hypothesis" / "examples", prop["database_key"]) == []
    assert wall < 3.0 + 120  # and the command ends: start-up, 3 s, pool shutdown
    assert ET.parse(tmp_path / "j.xml").getroot().find(".//testcase/failure") is None


def test_signals_lose_no_failure(tmp_path):
    """SIGINT, SIGTERM or SIGKILL mid-campaign, after a failure was found: nothing found is lost.
    (The three campaigns run at once, to keep the test short.)"""
    write(tmp_path, "test_bug.py", ONE_BUG)
    procs = {}
    try:
        for sig in ("SIGINT", "SIGTERM", "SIGKILL"):
            (tmp_path / sig).mkdir()
            procs[sig] = start_cli(
                [
                    "run",
                    "../test_bug.py",
                    "--duration",
                    "300s",
                    "--world-size",
                    "1",
                    "--database",
                    "db",
                    "--report",
                    "r.json",
                    "--junit",
                    "j.xml",
                ],
                cwd=tmp_path / sig,
            )
        found = {}
        for sig, proc in procs.items():  # signal each once a failure is found and a later round runs
            found[sig] = wait_for_report(
                tmp_path / sig / "r.json",
                lambda r: r["totals"]["distinct_failures"] >= 1 and r["properties"][0]["rounds"] >= 2,
                proc=proc,
            )
            proc.send_signal(getattr(signal, sig))
        results = {sig: finish(proc, timeout=60) for sig, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for sig, result in results.items():
        key = found[sig]["properties"][0]["database_key"]
        assert stored(tmp_path / sig / "db", key), f"{sig}: the failure found before it is not in the database"
        report = read_report(tmp_path / sig / "r.json")  # valid JSON whenever it exists
        assert report["totals"]["distinct_failures"] >= 1, sig
        if sig == "SIGKILL":
            assert result.returncode == -signal.SIGKILL
            assert report["status"] == "running"
            continue
        assert result.returncode == 1, (sig, result.stdout + result.stderr)
        assert report["status"] == "interrupted" and report["interrupted_by"] == sig
        [prop] = report["properties"]
        assert prop["status"] == "interrupted" and prop["stop_reason"] == f"interrupted by {sig}"
        assert "planted: n=10" in prop["failures"][0]["summary"]
        assert f"interrupted by {sig}" in result.stdout
        assert ET.parse(tmp_path / sig / "j.xml").getroot().find(".//testcase/failure") is not None


ALPHA_BETA = """
from hypothesis import given, strategies as st

def fail_big(ctx, n, what):
    if n >= 100:
        raise ValueError(f"{what}: n={n}")

@given(n=st.integers(0, 10**6))
def test_alpha(rank_pool, n):
    rank_pool.run(fail_big, n, "alpha bug")

@given(n=st.integers(0, 10**6))
def test_beta(rank_pool, n):
    rank_pool.run(fail_big, n, "beta bug")
"""


def test_redis_fleet_shares_one_database(tmp_path):
    """Two nodes of a fleet write to one redis-server: the second replays what the first found
    before anything else, then finds its own; a third process replays both."""
    write(tmp_path, "test_ab.py", ALPHA_BETA)
    with redis_server(tmp_path) as url:
        common = ["--world-size", "1", "--max-examples", "100", "--database", url, "--junit", ""]
        first = run_cli(["run", "test_ab.py::test_alpha", *common, "--report", "first.json"], cwd=tmp_path)
        assert first.returncode == 1, first.stdout + first.stderr
        [alpha] = read_report(tmp_path / "first.json")["properties"]
        assert "alpha bug: n=100" in alpha["failures"][0]["summary"] and not alpha["failures"][0]["from_database"]
        second = run_cli(["run", "test_ab.py", *common, "--report", "second.json"], cwd=tmp_path)
        assert second.returncode == 1, second.stdout + second.stderr
        alpha, beta = read_report(tmp_path / "second.json")["properties"]
        [known] = alpha["failures"]
        assert known["from_database"] and known["found_after_examples"] == 1  # replayed first
        assert "alpha bug: n=100" in known["summary"]
        assert "beta bug: n=100" in beta["failures"][0]["summary"] and not beta["failures"][0]["from_database"]
        replay = run_cli(["replay", "test_ab.py", "--database", url, "--world-size", "1"], cwd=tmp_path)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "FAILS           test_ab.py::test_alpha[cpu-w1]" in replay.stdout
    assert "FAILS           test_ab.py::test_beta[cpu-w1]" in replay.stdout
    assert "ValueError: alpha bug: n=100" in replay.stdout and "ValueError: beta bug: n=100" in replay.stdout
    assert f"--fuzzdist-database={url}" in replay.stdout  # the reproduce command points at the fleet's database
