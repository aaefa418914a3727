"""Nothing of ``fuzzdist run --jobs N`` outlives its parent: SIGKILL the parent, and every worker (each
writing its report) and every rank it started are gone within a bounded time."""

from __future__ import annotations

import glob
import os
import signal
import sys

import pytest
from cli_helpers import read_report, start_cli, wait_for_report, write
from descendants import alive, wait_all_dead

ECHO = '''
from hypothesis import given, strategies as st

def echo(ctx, k):
    return k

@given(k=st.integers(0, 10**9))
def test_echo(rank_pool, k):
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size
'''


def _descendants(root: int) -> list[int]:
    """Every live process below ``root`` (Linux: by the parent pid in /proc/<pid>/stat)."""
    parents: dict[int, int] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                parents[int(stat.split("/")[2])] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        children = [c for c, p in parents.items() if p == pid]
        found += children
        todo += children
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds descendants through /proc")
def test_workers_and_their_ranks_die_with_a_sigkilled_parent(tmp_path):
    write(tmp_path, "test_x.py", ECHO)
    parent = start_cli(["run", "test_x.py", "--jobs", "2", "--duration", "300s", "--seed", "1", "--world-size", "2",
                        "--database", "db", "--report", "r.json", "--junit", "", "--html", "",
                        "--progress", "none"], cwd=tmp_path)
    tree: list[int] = []
    try:
        running = wait_for_report(tmp_path / "r.json", lambda r: len(r["workers"]) == 2
                                  and all(w["examples"] > 0 for w in r["workers"]), proc=parent)
        workers = [w["pid"] for w in running["workers"]]
        tree = _descendants(parent.pid)
        assert set(workers) <= set(tree)
        assert len(tree) >= 2 + 2 * 2, tree  # two workers, each with its two ranks (and helpers)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        left = wait_all_dead(tree, timeout=60)
        assert left == [], f"processes {left} outlived their SIGKILLed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in tree:  # never leave any behind, whatever failed above
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    # each worker stopped as if told to: it wrote its last report, interrupted by SIGTERM
    [workdir] = glob.glob(str(tmp_path / "r.json.workers-*"))
    for index in range(2):
        report = read_report(os.path.join(workdir, f"worker-{index}.json"))
        assert report["status"] == "interrupted" and report["interrupted_by"] == "SIGTERM", report["status"]
