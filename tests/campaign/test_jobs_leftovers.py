"""A ``--jobs`` parent's workers' folder: owned by the parent, removed by the next run if the parent was
SIGKILLed, kept when it holds a dead worker's log."""

from __future__ import annotations

import os

from fuzzdist.campaign.jobs import work_directory
from fuzzdist.pool.leftovers import OWNER_LOCK, make_owned_dir


def test_the_next_parent_removes_the_workers_folder_a_dead_parent_left(tmp_path):
    report = tmp_path / "r.json"
    dead = make_owned_dir("r.json.workers-", dir=tmp_path)
    (tmp_path / dead.path / "worker-0.json").write_text("{}")
    dead.release()  # as a SIGKILLed parent's lock goes
    live = make_owned_dir("r.json.workers-", dir=tmp_path)  # another parent's, still running
    kept = make_owned_dir("r.json.workers-", dir=tmp_path)
    kept.keep()  # a dead worker's log, kept for the user
    other = make_owned_dir("other.json.workers-", dir=tmp_path)
    other.release()  # another report's: not this run's to clean
    try:
        mine = work_directory(str(report))
        try:
            assert not os.path.exists(dead.path)
            assert os.path.isdir(live.path) and os.path.isdir(kept.path) and os.path.isdir(other.path)
            assert os.path.basename(mine.path).startswith("r.json.workers-")
            assert os.path.exists(os.path.join(mine.path, OWNER_LOCK))
        finally:
            mine.release()
    finally:
        live.release()


def test_a_report_name_as_long_as_the_file_system_takes_gets_a_workers_folder(tmp_path):
    report = tmp_path / ("r" * 250 + ".json")
    mine = work_directory(str(report))
    try:
        assert os.path.dirname(mine.path) == str(tmp_path)
    finally:
        mine.release()


def test_a_child_given_the_lock_keeps_the_folder_owned_after_its_parent_is_gone(tmp_path):
    """Workers get the parent's lock: a SIGKILLed parent's folder stays while a worker writes its last report."""
    import subprocess
    import sys

    owned = make_owned_dir("r.json.workers-", dir=tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, pass_fds=(owned.fileno(),)
    )
    try:
        owned.release()  # the parent's own hold is gone
        work_directory(str(tmp_path / "r.json")).release()
        assert os.path.isdir(owned.path)
    finally:
        child.kill()
        child.wait()
    work_directory(str(tmp_path / "r.json")).release()
    assert not os.path.exists(owned.path)
