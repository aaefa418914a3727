"""Nothing of ``fuzzdist run --jobs N`` outlives its parent: SIGKILL the parent, and every worker (each
writing its report) and every rank it started are gone within a bounded time."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys

import pytest
from helpers.cli_helpers import read_report, start_cli, wait_for_report, write
from helpers.descendants import alive, wait_all_dead

import fuzzdist

ROOT = os.path.dirname(fuzzdist.__file__)

ECHO = """
from hypothesis import given, strategies as st

def echo(ctx, k):
    return k

@given(k=st.integers(0, 10**9))
def test_echo(rank_pool, k):
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size
"""


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
    parent = start_cli(
        [
            "run",
            "test_x.py",
            "--jobs",
            "2",
            "--duration",
            "300s",
            "--seed",
            "1",
            "--world-size",
            "2",
            "--database",
            "db",
            "--report",
            "r.json",
            "--junit",
            "",
            "--html",
            "",
            "--progress",
            "none",
        ],
        cwd=tmp_path,
    )
    tree: list[int] = []
    try:
        running = wait_for_report(
            tmp_path / "r.json",
            lambda r: len(r["workers"]) == 2 and all(w["examples"] > 0 for w in r["workers"]),
            proc=parent,
        )
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


# Where prctl is missing the worker's own thread does the work: stands for a worker, started by a middle process.
WORKER = """
import os, signal, sys, time, types

for name in ("fuzzdist", "fuzzdist.pool", "fuzzdist.campaign"):  # the two modules alone: no torch, starts at once
    package = sys.modules[name] = types.ModuleType(name)
    package.__path__ = [os.path.join(os.environ["FUZZDIST_ROOT"], *name.split(".")[1:])]
from fuzzdist.campaign import lifeline
from fuzzdist.pool.rank import process_tree

process_tree.die_with_driver = lambda pid, signum=None: False  # as on a platform without prctl
lifeline.EXIT_GRACE_S = 1.0
mode, out = sys.argv[1], sys.argv[2]

def on_term(signum, frame):
    with open(out, "w") as f:
        f.write("SIGTERM")
    if mode == "clean":
        sys.exit(0)

signal.signal(signal.SIGTERM, on_term)
lifeline.hold_to_parent(os.getppid())
print(os.getpid(), flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:  # "stuck" ignores the SIGTERM: only the SIGKILL after the grace ends it
    time.sleep(0.05)
"""

MIDDLE = """
import subprocess, sys, time
subprocess.Popen([sys.executable, *sys.argv[1:]])
time.sleep(120)
"""


@pytest.mark.parametrize("mode", ["clean", "stuck"])
def test_without_prctl_the_worker_watches_its_parent(tmp_path, mode):
    (tmp_path / "worker.py").write_text(WORKER)
    out = tmp_path / "signalled"
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, str(tmp_path / "worker.py"), mode, str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "FUZZDIST_ROOT": ROOT},
    )
    worker = None
    try:
        assert middle.stdout is not None
        worker = int(middle.stdout.readline())
        middle.kill()
        middle.wait(30)
        assert wait_all_dead([worker], timeout=30) == []
        assert out.read_text() == "SIGTERM"  # told to stop first, in both modes
    finally:
        if middle.poll() is None:
            middle.kill()
            middle.wait()
        if worker is not None and alive(worker):
            os.kill(worker, signal.SIGKILL)
