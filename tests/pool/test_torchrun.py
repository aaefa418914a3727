"""A pool formed by torchrun: rank 0 drives Hypothesis, the other ranks execute; crashes are failures."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import flight_record
from helpers.cli_helpers import read_report, stored, wait_for_report

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
# torchrun of this interpreter's torch (the torch under test), not whichever torchrun PATH finds first
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(tmp_path, nproc, mode, timeout=240):
    report = tmp_path / "report.json"
    # tests/ for torchrun_prop's rank function; the caller's PYTHONPATH for the fuzzdist under test.
    pythonpath = os.pathsep.join(filter(None, [str(HELPERS), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1")
    cmd = [
        *TORCHRUN,
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "--max-restarts",
        "0",
        str(HELPERS / "torchrun_prop.py"),
        str(report),
        mode,
        str(tmp_path / "db"),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert report.exists(), f"rank 0 wrote no report:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, json.loads(report.read_text())


def _campaign_cmd(prop_file, nproc, *budget):
    """``torchrun ... -m fuzzdist run PROP_FILE`` for ``nproc`` processes, and the environment to run it in."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    cmd = [
        *TORCHRUN,
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "--max-restarts",
        "0",
        "-m",
        "fuzzdist",
        "run",
        prop_file,
        *budget,
        "--world-size",
        str(nproc),
        "--report",
        "r.json",
        "--junit",
        "",
        "--database",
        "db",
        "--progress",
        "none",
    ]
    return cmd, env


def _start_campaign(tmp_path, prop_file):
    """A 2-process campaign in the background, its output in a log file (a pipe nobody reads would fill)."""
    cmd, env = _campaign_cmd(prop_file, 2, "--duration", "300s")
    log = tmp_path / "torchrun.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return proc, log


def _sigterm_and_wait(proc, log, pid):
    """SIGTERM ``pid`` and wait, bounded, for torchrun to end (its agent gives workers 30 s before SIGKILL)."""
    os.kill(pid, signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"torchrun did not end after SIGTERM\n{log.read_text()[-4000:]}") from None


def _kill(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("nproc", [2, 4])
def test_property_runs_on_every_torchrun_rank(tmp_path, nproc):
    proc, report = _torchrun(tmp_path, nproc, "ok")
    assert report["failure"] is None, report
    assert report["examples"] >= 30 and report["world_size"] == nproc
    assert len(report["pids"]) == nproc  # every rank ran the example, each in its own process
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_crashing_rank_is_a_rank_crash_saved_to_the_database(tmp_path):
    proc, report = _torchrun(tmp_path, 2, "crash")
    assert report["failure"] == "RankCrash", report
    assert report["failure_ranks"] == [1]
    assert "the torchrun group is spent" in report["message"]  # not "restarted": it can't be
    assert proc.returncode != 0
    assert any((tmp_path / "db").rglob("*")), "the crashing example was not saved"


def test_hanging_rank_is_a_timeout_with_its_stack(tmp_path):
    proc, report = _torchrun(tmp_path, 2, "hang")
    assert report["failure"] == "RankTimeout", report
    assert report["failure_ranks"] == [0, 1] or report["failure_ranks"] == [1]
    assert "sum_of_ranks" in report["message"]  # rank 1's stack, dumped on request
    assert "the torchrun group is spent" in report["message"] and "restarted" not in report["message"]


def test_a_skipped_collective_is_a_deadlock_explained_before_the_timeout(tmp_path):
    flight_record.skip_without_gloo_record()  # every hang would wait out the timeout, none a deadlock
    proc, report = _torchrun(tmp_path, 2, "deadlock")
    assert report["failure"] == "RankTimeout" and report["deadlock"], report
    assert report["failure_ranks"] == [0]
    # Rank 1's record comes through its heartbeat thread; rank 0's from its own example thread.
    assert report["message"].startswith("deadlock: rank 0 waits in all_reduce #1 (float32["), report["message"]
    assert "which rank 1 never entered: rank 1 returned after 0 collectives" in report["message"]


@pytest.mark.parametrize("planted", [False, True])
def test_fuzzdist_run_under_torchrun(tmp_path, planted):
    """`torchrun -m fuzzdist run`: rank 0 runs the campaign, the other rank executes every example."""
    prop = tmp_path / "test_tr_prop.py"
    prop.write_text((HELPERS / "torchrun_cli_prop.py").read_text())
    env = dict(os.environ, OMP_NUM_THREADS="1", PLANT_BUG="1" if planted else "0")
    cmd = [
        *TORCHRUN,
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "--max-restarts",
        "0",
        "-m",
        "fuzzdist",
        "run",
        str(prop),
        "--max-examples",
        "30",
        "--world-size",
        "2",
        "--report",
        str(tmp_path / "r.json"),
        "--junit",
        "",
        "--database",
        str(tmp_path / "db"),
        "--progress",
        "none",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    report = json.loads((tmp_path / "r.json").read_text())
    (result,) = report["properties"].values() if isinstance(report["properties"], dict) else report["properties"]
    assert result["examples"] >= 30 if not planted else result["examples"] >= 1
    if planted:
        assert proc.returncode != 0
        assert result["status"] == "failed" and "n=7," in result["failures"][0]["example"]
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert result["status"] == "passed"


# Rank 1 fails most examples; the campaign (rank 0's process, which runs this test function) notes its pid.
SIGNALLED_PROP = """
import os
import re
from hypothesis import given, strategies as st

def check(ctx, n):
    if n >= 10 and ctx.rank == 1:
        raise ValueError(f"planted: n={n}")

@given(n=st.integers(0, 10**9))
def test_bug(rank_pool, n):
    if not os.path.exists("driver.pid"):
        with open("driver.pid.tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace("driver.pid.tmp", "driver.pid")
    rank_pool.run(check, n)
"""


@pytest.mark.parametrize("target", ["rank0", "agent"])
def test_sigterm_under_torchrun_writes_the_report_and_loses_no_failure(tmp_path, target):
    """SIGTERM to rank 0 (the campaign), or to torchrun's agent (which forwards it to every rank), after a
    failure was found: the campaign's handler runs although TorchrunPool handles SIGTERM too, so the
    report says interrupted by SIGTERM with the failure in it, and the failure is in the database."""
    (tmp_path / "test_sig_prop.py").write_text(SIGNALLED_PROP)
    proc, log = _start_campaign(tmp_path, "test_sig_prop.py")
    try:
        try:
            found = wait_for_report(
                tmp_path / "r.json",
                lambda r: r["totals"]["distinct_failures"] >= 1 and r["properties"][0]["rounds"] >= 2,
                proc=proc,
                timeout=180,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{log.read_text()[-4000:]}") from None
        _sigterm_and_wait(proc, log, proc.pid if target == "agent" else int((tmp_path / "driver.pid").read_text()))
    finally:
        _kill(proc)
    output = log.read_text()
    report = read_report(tmp_path / "r.json")
    assert report["status"] == "interrupted" and report["interrupted_by"] == "SIGTERM", output[-4000:]
    [prop] = report["properties"]
    assert prop["status"] == "interrupted" and prop["stop_reason"] == "interrupted by SIGTERM", prop
    assert "planted: n=10" in prop["failures"][0]["summary"], prop["failures"]
    assert not [f for f in prop["failures"] if "RankCrash" in f["summary"]], prop["failures"]  # a stop is no crash
    key = found["properties"][0]["database_key"]
    assert stored(tmp_path / "db", key), "the failure found before the SIGTERM is not in the database"
    assert proc.returncode != 0  # a failure was found (rank 0 exits 1), or the agent was stopped
    assert "interrupted by SIGTERM" in output


# Rank 1 dies in most examples; torchrun's agent then SIGTERMs every worker, rank 0 (the campaign) included.
CRASHING_PROP = """
import os
import re
from hypothesis import given, strategies as st

def check(ctx, n):
    if n >= 50 and ctx.rank == 1:
        os._exit(7)

@given(n=st.integers(0, 100))
def test_crash(rank_pool, n):
    rank_pool.run(check, n)
"""


@pytest.mark.parametrize("nproc", [2, 3])
def test_a_rank_dying_under_fuzzdist_run_is_a_rank_crash_in_the_report_and_the_database(tmp_path, nproc):
    """torchrun's agent answers rank 1's death with a SIGTERM to every worker: rank 0 tells the dead rank
    (no SIGTERM mark, no heartbeat) from the signalled ones (rank 2 marks), so the example is a RankCrash of
    rank 1 alone, which Hypothesis saves and the campaign reports, before the campaign ends as interrupted
    by SIGTERM."""
    (tmp_path / "test_crash_prop.py").write_text(CRASHING_PROP)
    cmd, env = _campaign_cmd("test_crash_prop.py", nproc, "--max-examples", "1000")
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    output = proc.stdout[-4000:] + proc.stderr[-4000:]
    report = read_report(tmp_path / "r.json")
    [prop] = report["properties"]
    assert [f["summary"].split(":")[0] for f in prop["failures"]] == ["RankCrash"], (prop["failures"], output)
    assert "died: rank 1 (" in prop["failures"][0]["summary"], prop["failures"]
    assert "rank 0" not in prop["failures"][0]["summary"] and "rank 2" not in prop["failures"][0]["summary"]
    assert "check" in prop["failures"][0]["example"] or "n=" in prop["failures"][0]["example"], prop["failures"]
    assert stored(tmp_path / "db", prop["database_key"]), "the crashing example is not in the database"
    assert report["status"] == "interrupted" and report["interrupted_by"] == "SIGTERM", report
    assert proc.returncode != 0


# Once the test writes "slow", every example stays in flight: rank 0 sleeps; rank 1 sleeps too ("python"), or
# waits for rank 0 in all_reduce ("collective": blocked in C++, where a Python signal handler can't run).
STOPPED_PROP = """
import os
import re
import time

import torch
import torch.distributed as dist
from hypothesis import given, strategies as st

def check(ctx, n, slow):
    if slow:
        if ctx.rank == 0:
            open("in_flight", "w").close()
        if ctx.rank == 0 or slow == "python":
            time.sleep(60)
        dist.all_reduce(torch.ones(1), group=ctx.group)
    if n >= 10 and ctx.rank == 1:
        raise ValueError(f"planted: n={n}")

@given(n=st.integers(0, 10**9))
def test_bug(rank_pool, n):
    if not os.path.exists("driver.pid"):
        with open("driver.pid.tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace("driver.pid.tmp", "driver.pid")
    slow = open("slow").read() if os.path.exists("slow") else None
    rank_pool.run(check, n, slow)  # decided once, for every rank
"""


@pytest.mark.parametrize("target, rank1", [("agent", "python"), ("agent", "collective"), ("rank0", "collective")])
def test_stopping_the_job_during_an_example_records_no_false_crash(tmp_path, target, rank1):
    """SIGTERM while an example is in flight, from a user: to torchrun's agent (every rank is signalled; rank 1
    marks it before it ends, from Python at once, or blocked in all_reduce from its watching thread) or to
    rank 0 alone (rank 1 is alive: it beats).  Either way no rank died, so the example in flight is dropped,
    not saved as a RankCrash: the report holds only the failure found before, and says interrupted by SIGTERM."""
    (tmp_path / "test_stop_prop.py").write_text(STOPPED_PROP)
    proc, log = _start_campaign(tmp_path, "test_stop_prop.py")
    try:
        try:
            found = wait_for_report(
                tmp_path / "r.json",
                lambda r: r["totals"]["distinct_failures"] >= 1 and r["properties"][0]["rounds"] >= 2,
                proc=proc,
                timeout=180,
            )
            (tmp_path / "slow").write_text(rank1)
            deadline = time.monotonic() + 120
            while not (tmp_path / "in_flight").exists():
                assert time.monotonic() < deadline and proc.poll() is None, "no example went in flight"
                time.sleep(0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{log.read_text()[-4000:]}\n{(tmp_path / 'r.json').read_text()}") from None
        time.sleep(0.5)  # rank 1 into its sleep or all_reduce
        _sigterm_and_wait(proc, log, proc.pid if target == "agent" else int((tmp_path / "driver.pid").read_text()))
    finally:
        _kill(proc)
    output = log.read_text()
    report = read_report(tmp_path / "r.json")
    assert report["status"] == "interrupted" and report["interrupted_by"] == "SIGTERM", output[-4000:]
    [prop] = report["properties"]
    assert len(prop["failures"]) == 1 and "planted: n=10" in prop["failures"][0]["summary"], prop["failures"]
    assert len(stored(tmp_path / "db", found["properties"][0]["database_key"])) == 1, "only the planted failure"


# A wrapper between torchrun and fuzzdist: "exec" hands the rank's process over; without it, the shell stays
# every rank's own parent.
WRAPPERS = {
    "differing": '#!/bin/sh\nexport FUZZDIST_TORCHRUN_SECRET="secret-of-local-rank-$LOCAL_RANK-0123456789"\n'
    'exec "$FUZZDIST_TEST_PYTHON" -m fuzzdist "$@"\n',
    "no-exec": '#!/bin/sh\n"$FUZZDIST_TEST_PYTHON" -m fuzzdist "$@"\n',
}


def _wrapped_campaign(tmp_path, wrapper):
    script = tmp_path / "wrapper.sh"
    script.write_text(WRAPPERS[wrapper])
    script.chmod(0o755)
    prop = tmp_path / "test_tr_prop.py"
    prop.write_text((HELPERS / "torchrun_cli_prop.py").read_text())
    env = dict(os.environ, OMP_NUM_THREADS="1", PLANT_BUG="0", FUZZDIST_TEST_PYTHON=sys.executable)
    env.pop("FUZZDIST_TORCHRUN_SECRET", None)
    env.pop("FUZZDIST_TORCHRUN_SECRET_FILE", None)
    cmd = [
        *TORCHRUN,
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        "--max-restarts",
        "0",
        "--no-python",
        str(script),
        "run",
        str(prop),
        "--max-examples",
        "5",
        "--world-size",
        "2",
        "--report",
        str(tmp_path / "r.json"),
        "--junit",
        "",
        "--database",
        str(tmp_path / "db"),
        "--progress",
        "none",
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)


def test_ranks_given_different_secrets_are_one_line_and_exit_2_with_nothing_saved(tmp_path):
    """Each rank with its own secret could not read the others' messages: refused before anything runs."""
    started = time.monotonic()
    proc = _wrapped_campaign(tmp_path, "differing")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert re.search(
        r"rank 1's secret is not rank 0's \(FUZZDIST_TORCHRUN_SECRET\)|rank\(s\) 1 have another "
        r"secret than rank 0's \(FUZZDIST_TORCHRUN_SECRET\)",
        out,
    ), out[-3000:]
    assert re.search(r"exitcode\s*:\s*2\b", out), out[-3000:]  # torchrun's summary: the rank's exit code
    assert "RankCrash" not in out and "SIGKILL" not in out, out[-3000:]
    assert not (tmp_path / "r.json").exists()
    assert not (tmp_path / "db").exists() or not any(p.is_file() for p in (tmp_path / "db").rglob("*"))
    assert time.monotonic() - started < 120


def test_a_wrapper_that_does_not_exec_still_gives_every_rank_the_one_node_secret(tmp_path):
    proc = _wrapped_campaign(tmp_path, "no-exec")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    [result] = json.loads((tmp_path / "r.json").read_text())["properties"]
    assert result["status"] == "passed" and result["examples"] >= 5
