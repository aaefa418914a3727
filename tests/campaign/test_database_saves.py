"""Nothing found is lost: a failure the example database did not keep is said, kept in the report with a
replay command that needs no database, and given its own exit code; a rank pool that can't restart is a
campaign error, never a failure of the property.

Each campaign runs in a subprocess over a throwaway property file, as in test_campaign.py.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
from helpers.cli_helpers import cli_env, read_report, run_cli, write
from hypothesis.database import InMemoryExampleDatabase

from fuzzdist.campaign.database import CheckedSaves, Database, open_database, replay_command
from fuzzdist.campaign.merge import merge_reports, state_from_report
from fuzzdist.campaign.report import CampaignState
from fuzzdist.cli.run import _exit_code

# test_alpha fails (and its failure is saved); test_beta makes the database unwritable at its first example,
# then fails: its failure can't be saved.  As root, which chmod doesn't stop, the folder is replaced by a file.
UNWRITABLE_HALFWAY = """
import os
import shutil
from hypothesis import given, strategies as st

def check(ctx, n, what):
    if n >= 10:
        raise ValueError(f"{what} bug: n={n}")

def make_unwritable(path):
    if os.path.isfile(path):
        return
    if os.geteuid() != 0:
        for folder, _, _ in os.walk(path):
            os.chmod(folder, 0o555)
    else:
        shutil.move(path, path + ".moved")
        with open(path, "w") as f:
            f.write("not a folder")

@given(n=st.integers(0, 100))
def test_alpha(rank_pool, n):
    rank_pool.run(check, n, "alpha")

@given(n=st.integers(0, 100))
def test_beta(rank_pool, n):
    make_unwritable("db")
    rank_pool.run(check, n, "beta")
"""

BETA_ONLY_FAILS = UNWRITABLE_HALFWAY.replace('rank_pool.run(check, n, "alpha")', 'rank_pool.run(check, 0, "alpha")')


def _writable_again(path) -> None:
    """Undo make_unwritable's chmod, so pytest can remove tmp_path."""
    import os

    if path.is_dir():
        for folder, _, _ in os.walk(path):
            os.chmod(folder, 0o755)


def _replay(command: str, cwd) -> subprocess.CompletedProcess:
    """Run a report's replay command (``fuzzdist replay ...``) as a user would paste it."""
    words = shlex.split(command)
    assert words[:2] == ["fuzzdist", "replay"], command
    return subprocess.run(
        [sys.executable, "-m", "fuzzdist", *words[1:]],
        cwd=cwd,
        env=cli_env(),
        text=True,
        capture_output=True,
        timeout=180,
    )


def test_a_database_unwritable_halfway_loses_nothing_the_report_replays_every_failure(tmp_path):
    write(tmp_path, "test_ab.py", UNWRITABLE_HALFWAY)
    try:
        result = run_cli(
            [
                "run",
                "test_ab.py",
                "--max-examples",
                "60",
                "--world-size",
                "1",
                "--database",
                "db",
                "--report",
                "r.json",
                "--junit",
                "",
            ],
            cwd=tmp_path,
        )
    finally:
        _writable_again(tmp_path / "db")
    out = result.stdout + result.stderr
    assert result.returncode == 4, out  # something found was not kept
    report = read_report(tmp_path / "r.json")
    alpha, beta = report["properties"]
    [kept] = alpha["failures"]
    [lost] = beta["failures"]
    assert "alpha bug" in kept["summary"] and kept["saved"] is True and kept["not_saved"] is None
    assert "beta bug" in lost["summary"] and lost["saved"] is False
    assert lost["not_saved"] in ("Permission denied", "Not a directory"), lost
    assert lost["reproduce"] == lost["replay"]  # the HTML page and the JUnit file show the command that works
    assert report["totals"]["failures_not_saved"] == 1
    # One line says it as it happens; the summary marks it and gives the command that needs no database.
    [warning] = [line for line in out.splitlines() if "did not keep a failure" in line]
    assert "test_ab.py::test_beta[cpu-w1]" in warning and lost["replay"] in warning
    assert "1 NOT SAVED in the example database" in result.stdout
    assert f"reproduce: {lost['replay']}" in result.stdout
    # Every failure it printed replays from the report alone, whatever is left of the database.
    for failure, nodeid in ((kept, alpha["nodeid"]), (lost, beta["nodeid"])):
        assert failure["replay"].startswith(f"fuzzdist replay {shlex.quote(nodeid)} --blob "), failure
        replay = _replay(failure["replay"], tmp_path)
        assert replay.returncode == 1, replay.stdout + replay.stderr
        assert f"FAILS           {nodeid}" in replay.stdout, replay.stdout
        assert failure["summary"].split(": ", 1)[1] in replay.stdout  # the same bug, the same minimal example


def test_a_jobs_worker_whose_database_did_not_keep_a_failure_is_said_by_the_parent(tmp_path):
    write(tmp_path, "test_ab.py", BETA_ONLY_FAILS)
    try:
        result = run_cli(
            [
                "run",
                "test_ab.py",
                "--jobs",
                "2",
                "--max-examples",
                "40",
                "--world-size",
                "1",
                "--database",
                "db",
                "--report",
                "r.json",
                "--junit",
                "",
                "--progress",
                "plain",
            ],
            cwd=tmp_path,
        )
    finally:
        _writable_again(tmp_path / "db")
    out = result.stdout + result.stderr
    assert result.returncode == 4, out
    report = read_report(tmp_path / "r.json")
    assert report["totals"]["failures_not_saved"] == 1
    [beta] = [p for p in report["properties"] if "test_beta" in p["nodeid"]]
    [lost] = beta["failures"]
    assert lost["saved"] is False and lost["replay"].startswith("fuzzdist replay ")
    assert all(w["died"] is None for w in report["workers"]), report["workers"]  # exit 4 is not a death
    assert any("did not keep a failure of test_ab.py::test_beta[cpu-w1]" in line for line in out.splitlines()), out
    assert "1 NOT SAVED in the example database" in result.stdout


def test_merge_keeps_the_record_the_database_kept_and_counts_the_lost_ones():
    def report(saved, shrunk, summary):
        failure = {
            "origin": "ValueError at x.py:1",
            "kind": "failure",
            "summary": summary,
            "example": "f()",
            "saved": saved,
            "shrunk": shrunk,
            "replay": f"fuzzdist replay x --blob {summary}",
        }
        return {"properties": [{"nodeid": "x.py::t", "status": "failed", "failures": [failure]}]}

    both = merge_reports({}, [report(False, True, "lost"), report(True, False, "kept")], [{}, {}])
    [kept] = both["properties"][0]["failures"]
    assert kept["saved"] is True and kept["summary"] == "kept"  # the shared database has this one
    assert both["totals"]["failures_not_saved"] == 0
    lost = merge_reports({}, [report(False, True, "lost"), None], [{}, {}])
    assert lost["totals"]["failures_not_saved"] == 1
    state = state_from_report(lost, CampaignState([], None, "db", None, None, None))
    assert state.not_kept() == 1 and _exit_code(state) == 4


class _RefusingDatabase(InMemoryExampleDatabase):
    """What Redis does when it can't take a write: the save raises."""

    def save(self, key: bytes, value: bytes) -> None:
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def test_a_save_that_raises_is_kept_not_raised_and_said_when_read_back():
    database = Database(CheckedSaves(_RefusingDatabase()), "redis://127.0.0.1:6379/0", False)
    database.db.save(b"key", b"entry")  # raised inside Hypothesis's engine, it would be filed as the failure
    assert database.not_kept(b"key", [b"entry"]) == (
        "ConnectionError: Error 111 connecting to 127.0.0.1:6379. Connection refused."
    )


def test_an_entry_read_back_is_kept_and_an_empty_one_is_not(tmp_path):
    database = open_database(str(tmp_path / "db"))
    database.db.save(b"key", b"entry")
    assert database.not_kept(b"key", [b"entry"]) is None
    assert database.not_kept(b"key", [b"other"]) == "what was read back is not what was saved"
    database.db.move(b"key", b"key.secondary", b"entry")  # moved aside by a smaller example: still kept
    assert database.not_kept(b"key", [b"entry"]) is None


def test_the_replay_command_takes_the_pool_options_the_node_id_needs():
    command = replay_command(
        "t.py::test_x[cpu-w1]", "AXicY2BgAAAABAAB", ["--fuzzdist-world-size=1", "--fuzzdist-timeout=5"]
    )
    assert command == "fuzzdist replay 't.py::test_x[cpu-w1]' --blob AXicY2BgAAAABAAB --world-size 1 --timeout 5"


@pytest.mark.parametrize("blob", ["not base64!", "AgAA"])
def test_a_bad_blob_is_one_line_and_exit_2(tmp_path, blob):
    result = run_cli(["replay", "test_x.py::test_x", "--blob", blob], cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "is not a Hypothesis @reproduce_failure blob" in line


# A rank dies in the third example, and its restart fails (what a full $TMPDIR does to a restart); by the
# next property the room is back, and the pool starts fresh ranks for it.
CRASH_THEN_NO_RESTART = '''
import os
from hypothesis import given, strategies as st

calls = []

def die_or_echo(ctx, die):
    if die:
        os._exit(3)
    return ctx.rank

def no_room_once(start_set):
    """The pool's start of a rank set, failing the first time (the restart after the crash) only."""
    tries = []

    def start():
        tries.append(1)
        if len(tries) == 1:
            from fuzzdist.errors import PoolStartupError
            raise PoolStartupError("planted: no room for the ranks' files")
        return start_set()
    return start

@given(n=st.integers(0, 100))
def test_crash(rank_pool, n):
    calls.append(n)
    if len(calls) == 3:
        rank_pool._start_set = no_room_once(rank_pool._start_set)
    rank_pool.run(die_or_echo, len(calls) == 3)

@given(n=st.integers(0, 100))
def test_after(rank_pool, n):
    assert rank_pool.run(die_or_echo, False) == [0]
'''


def test_a_pool_that_cant_restart_is_a_campaign_error_and_the_crash_stays_the_failure(tmp_path):
    write(tmp_path, "test_pool.py", CRASH_THEN_NO_RESTART)
    result = run_cli(
        [
            "run",
            "test_pool.py",
            "--max-examples",
            "30",
            "--world-size",
            "1",
            "--database",
            "db",
            "--report",
            "r.json",
            "--junit",
            "",
        ],
        cwd=tmp_path,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    report = read_report(tmp_path / "r.json")
    crash, after = report["properties"]
    assert crash["status"] == "error", crash
    assert crash["reason"] == (
        "the rank pool can't run examples: its ranks could not be restarted "
        "(PoolStartupError: planted: no room for the ranks' files)"
    ), crash["reason"]
    [failure] = crash["failures"]  # the crash found before; nothing of the pool's own
    assert failure["summary"].startswith("RankCrash"), failure
    assert failure["saved"] is True
    assert "IndexError" not in out and "PoolStartupError" not in "".join(f["summary"] for f in crash["failures"])
    [line] = [line for line in out.splitlines() if line.startswith("fuzzdist: error: ")]
    assert "test_pool.py::test_crash[cpu-w1]" in line and "planted: no room" in line
    assert after["status"] == "passed" and after["examples"] == 30, after  # the pool started fresh ranks for it
    # The database holds the crash's example only.
    from hypothesis.database import DirectoryBasedExampleDatabase

    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    key = bytes.fromhex(crash["database_key"])
    assert len(list(db.fetch(key))) == 1


def test_a_full_temporary_folder_is_named_as_the_reason(tmp_path, monkeypatch):
    database = open_database(str(tmp_path / "db"))
    full = tmp_path / "tmp-full"
    full.write_text("a file, not a folder: nothing can be created in it")
    monkeypatch.setattr("tempfile.tempdir", str(full))
    database.db.save(b"key", b"entry")  # Hypothesis writes it in the temporary folder first: lost
    assert database.not_kept(b"key", [b"entry"]) == f"the temporary folder {full}: Not a directory"


def test_an_empty_entry_left_by_a_full_disk_is_not_kept(tmp_path):
    database = open_database(str(tmp_path / "db"))
    inner = database.db.db.inner  # BoundedDatabase(CheckedSaves(the directory database))
    inner.save(b"key", b"entry")
    value_path = inner._value_path(b"key", b"entry")  # what a full disk leaves: the file, with no bytes in it
    value_path.write_bytes(b"")
    assert list(database.db.fetch(b"key")) == [b""]
    assert database.not_kept(b"key", [b"entry"]) == "what was read back is not what was saved"
