"""``fuzzdist run --jobs N``: bad input refused early; merging; a dead worker loses nothing; signals stop all."""

from __future__ import annotations

import os
import signal
import time
import xml.etree.ElementTree as ET

import pytest
from helpers.cli_helpers import finish, read_report, start_cli, stored, wait_for_report, write

from fuzzdist.campaign.jobs import SEED_STRIDE, check_jobs, gpu_slices, merge_junit
from fuzzdist.campaign.merge import merge_properties
from fuzzdist.cli import main
from fuzzdist.errors import JobsError

# test_bug fails on almost every input (worker 0 gets it); test_passes never fails (worker 1).
BUG_AND_PASS = """
from hypothesis import given, strategies as st

def check(ctx, n):
    if n >= 10:
        raise ValueError(f"planted: n={n}")

def echo(ctx, k):
    return k

@given(n=st.integers(0, 10**9))
def test_bug(rank_pool, n):
    rank_pool.run(check, n)

@given(k=st.integers(0, 10**9))
def test_passes(rank_pool, k):
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size
"""


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "env", "message"),
    [
        ("0", {}, "--jobs 0: give at least 1 worker"),
        ("two", {}, "--jobs 'two' is not a whole number"),
        ("999", {}, "--jobs 999 is more than the"),
        ("2", {"TORCHELASTIC_RUN_ID": "x"}, "--jobs is not supported under torchrun"),
    ],
)
def test_bad_jobs_is_one_line_and_exit_2_before_anything_runs(tmp_path, monkeypatch, capsys, jobs, env, message):
    write(tmp_path, "test_x.py", BUG_AND_PASS)
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["run", "test_x.py", "--jobs", jobs, "--duration", "5s"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1 and out == ""
    assert not (tmp_path / "fuzzdist-report.json").exists()


def test_check_jobs_gpus_and_cores():
    assert check_jobs(1, "cpu", None, in_torchrun=True, cores=1) is None  # one job: nothing to check
    assert gpu_slices(["0", "1", "2", "3", "4", "5", "6", "7"], 4, 2) == ["0,1", "2,3", "4,5", "6,7"]
    assert gpu_slices(["3", "5", "7"], 3, 1) == ["3", "5", "7"]  # of CUDA_VISIBLE_DEVICES as given
    assert check_jobs(2, "cuda", 2, in_torchrun=False, cores=16, gpus=["0", "1", "2", "3"]) == ["0,1", "2,3"]
    with pytest.raises(
        JobsError,
        match=r"needs 8 GPUs \(4 workers x 2 ranks each\), but 4 are visible: "
        r"use --jobs 2 or fewer",
    ):
        check_jobs(4, "cuda", 2, in_torchrun=False, cores=16, gpus=["0", "1", "2", "3"])
    with pytest.raises(JobsError, match="run on a node with more GPUs"):
        gpu_slices(["0"], 2, 2)
    with pytest.raises(JobsError, match="use --jobs 2 or fewer"):
        check_jobs(3, "cpu", None, in_torchrun=False, cores=2)


# -- merging ------------------------------------------------------------------------------------


def test_merge_one_property_from_two_workers():
    a = {
        "nodeid": "t",
        "status": "passed",
        "examples": 10,
        "invalid_examples": 1,
        "elapsed_s": 2.0,
        "failures": [{"origin": "X", "summary": "x", "occurrences": 2, "shrunk": False, "example": "big"}],
        "events": {"dtype=f32": 3},
        "targets": {"size": 4.0},
        "stop_reason": "time budget",
        "event_pairs": [{"x": "a", "y": "b", "cells": [["1", "2", 3]]}],
    }
    b = {
        "nodeid": "t",
        "status": "failed",
        "examples": 5,
        "invalid_examples": 0,
        "elapsed_s": 2.5,
        "failures": [
            {"origin": "X", "summary": "x", "occurrences": 1, "shrunk": True, "example": "small"},
            {"origin": "Y", "summary": "y", "occurrences": 1},
        ],
        "events": {"dtype=f32": 1, "dtype=f64": 2},
        "targets": {"size": 9.0},
        "stop_reason": "time budget",
        "event_pairs": [{"x": "a", "y": "b", "cells": [["1", "2", 1], ["1", "3", 1]]}],
    }
    merged = merge_properties([a, b])
    assert merged["examples"] == 15 and merged["invalid_examples"] == 1 and merged["elapsed_s"] == 2.5
    assert merged["status"] == "failed" and merged["stop_reason"] == "time budget"
    x, y = merged["failures"]
    assert (x["origin"], x["example"], x["occurrences"]) == ("X", "small", 3) and y["origin"] == "Y"
    assert merged["distinct_failures"] == 2
    assert merged["events"] == {"dtype=f32": 4, "dtype=f64": 2} and merged["targets"] == {"size": 9.0}
    assert merged["event_pairs"] == [{"x": "a", "y": "b", "cells": [["1", "2", 4], ["1", "3", 1]]}]


def test_merge_junit_keeps_one_case_per_property_the_worst(tmp_path):
    def suite(path, cases):
        path.write_text("<testsuites><testsuite>" + "".join(cases) + "</testsuite></testsuites>")
        return str(path)

    one = suite(
        tmp_path / "0.xml",
        ['<testcase classname="m" name="a" time="1"/>', '<testcase classname="m" name="b" time="1"/>'],
    )
    two = suite(tmp_path / "1.xml", ['<testcase classname="m" name="a" time="1"><failure message="f"/></testcase>'])
    merge_junit([one, two, str(tmp_path / "missing.xml")], str(tmp_path / "out.xml"))
    root = ET.parse(tmp_path / "out.xml").getroot()
    assert [c.get("name") for c in root.iter("testcase")] == ["a", "b"]
    assert root.find("testsuite").get("failures") == "1" and root.find(".//testcase/failure") is not None


# -- whole campaigns ------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by init) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# test_bug as in BUG_AND_PASS, but its worker stops itself (SIGSTOP) when Hypothesis saves the failure,
# before or after the save: the test SIGKILLs it there, at the moment it names.
STOPPED_AT_SAVE = """
import os, signal
from hypothesis import given, strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

STOP = {stop!r}
_save = DirectoryBasedExampleDatabase.save

_saving = []  # inside a save: the database's own saves (its list of keys) go through

def _stopping_save(self, key, value):
    outer = not _saving
    _saving.append(key)
    try:
        if not outer or key.startswith(b"fuzzdist.") or STOP == "after":  # fuzzdist's index is no failure
            _save(self, key, value)
    finally:
        _saving.pop()
    if outer and not key.startswith(b"fuzzdist."):
        os.kill(os.getpid(), signal.SIGSTOP)

def check(ctx, n):
    if n >= 10:
        raise ValueError(f"planted: n={{n}}")

def echo(ctx, k):
    return k

@given(n=st.integers(0, 10**9))
def test_bug(rank_pool, n):
    DirectoryBasedExampleDatabase.save = _stopping_save
    rank_pool.run(check, n)

@given(k=st.integers(0, 10**9))
def test_passes(rank_pool, k):
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size
"""


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "T"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads a process's state in /proc (Linux)")
@pytest.mark.parametrize("stop", ["after", "before"])
def test_a_worker_killed_mid_campaign_loses_nothing_and_the_others_go_on(tmp_path, stop):
    """A worker SIGKILLed after its report named a failure: if Hypothesis had saved it, the failure is in
    the database and the report; if not (killed between the report and the save), it is said NOT SAVED,
    with exit 4 and a replay line that needs no database.  Either way the other worker goes on."""
    write(tmp_path, "test_x.py", STOPPED_AT_SAVE.format(stop=stop))
    proc = start_cli(
        [
            "run",
            "test_x.py",
            "--jobs",
            "2",
            "--duration",
            "8s",
            "--database",
            "db",
            "--report",
            "r.json",
            "--junit",
            "j.xml",
            "--progress",
            "plain",
        ],
        cwd=tmp_path,
    )
    try:
        found = wait_for_report(
            tmp_path / "r.json",
            lambda r: r["totals"]["distinct_failures"] >= 1 and all(w["properties"] for w in r["workers"]),
            proc=proc,
        )
        [killed] = [w for w in found["workers"] if w["properties"] == ["test_x.py::test_bug[cpu-w2]"]]
        deadline = time.monotonic() + 120
        while not _stopped(killed["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _stopped(killed["pid"]), "the worker never reached Hypothesis's save"
        os.kill(killed["pid"], signal.SIGKILL)
        result = finish(proc, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = read_report(tmp_path / "r.json")
    bug, passes = (next(p for p in report["properties"] if name in p["nodeid"]) for name in ("test_bug", "test_passes"))
    [failure] = bug["failures"]
    assert "planted: n=" in failure["summary"]  # in the merged report
    assert f"worker {killed['index']} (pid {killed['pid']}) died: killed by SIGKILL" in result.stdout
    if stop == "after":  # saved: in the database, and nothing said lost
        assert result.returncode == 1, result.stdout + result.stderr
        assert stored(tmp_path / "db", bug["database_key"]) and failure["saved"] is not False
        assert "NOT SAVED" not in result.stdout and report["totals"]["failures_not_saved"] == 0
    else:  # not saved: said so, exit 4, and the report replays it with no database
        assert result.returncode == 4, result.stdout + result.stderr
        assert not stored(tmp_path / "db", bug["database_key"])
        assert failure["saved"] is False
        assert "died (killed by SIGKILL) before the database saved it" in failure["not_saved"]
        assert failure["reproduce"] == failure["replay"] and " --blob " in failure["replay"]
        assert report["totals"]["failures_not_saved"] == 1
        assert "NOT SAVED" in result.stdout and failure["replay"] in result.stdout
    assert report["status"] == "error" and "died: killed by SIGKILL" in report["error"]
    dead = report["workers"][killed["index"]]
    assert dead["status"] == "died" and dead["died"] == "killed by SIGKILL" and os.path.exists(dead["log"])
    # the other worker went on to the end of its budget
    assert passes["status"] == "passed" and passes["stop_reason"] == "time budget" and passes["examples"] > 0
    assert ET.parse(tmp_path / "j.xml").getroot().find(".//testcase[@name='test_passes[cpu-w2]']") is not None


def test_sigterm_stops_every_worker_and_writes_the_merged_report(tmp_path):
    """One property, two workers on it, told apart by seed."""
    write(tmp_path, "test_x.py", BUG_AND_PASS)
    proc = start_cli(
        [
            "run",
            "test_x.py::test_passes",
            "--jobs",
            "2",
            "--duration",
            "120s",
            "--seed",
            "5",
            "--database",
            "db",
            "--report",
            "r.json",
            "--junit",
            "",
            "--progress",
            "none",
        ],
        cwd=tmp_path,
    )
    try:
        running = wait_for_report(
            tmp_path / "r.json",
            lambda r: len(r["workers"]) == 2 and all(w["examples"] > 0 for w in r["workers"]),
            proc=proc,
        )
        proc.send_signal(signal.SIGTERM)
        result = finish(proc, timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert result.returncode == 128 + signal.SIGTERM, result.stdout + result.stderr
    report = read_report(tmp_path / "r.json")
    assert report["status"] == "interrupted" and report["interrupted_by"] == "SIGTERM"
    assert sorted(w["seed"] for w in report["workers"]) == [5, 5 + SEED_STRIDE]
    assert all(w["properties"] == ["test_x.py::test_passes[cpu-w2]"] for w in report["workers"])
    [prop] = report["properties"]
    assert prop["workers"] == [0, 1] and prop["examples"] == sum(w["examples"] for w in report["workers"])
    assert not any(_alive(w["pid"]) for w in running["workers"])
    assert "workers: 2" in result.stdout
