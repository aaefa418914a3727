"""Nothing left in the temporary folder: after a run, after SIGINT, after SIGTERM; a dead driver's pool folder
goes at the next start; a rank's multiprocessing folder goes before its os._exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import descendants
from helpers.cli_helpers import cli_env, wait_for_report, write

from fuzzdist.pool import leftovers
from fuzzdist.pool.leftovers import OWNER_LOCK, POOL_DIR_PREFIX, make_owned_dir, remove_leftovers

# -- folders whose owner is dead --------------------------------------------------------------------

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _leftover(folder: Path) -> Path:
    """``folder`` as a dead owner leaves it: its lock file there, nobody holding it."""
    folder.mkdir()
    (folder / OWNER_LOCK).touch()
    return folder


@pytest.fixture
def holder():
    """Hold the lock of a folder from another process: ``holder(folder)`` until the test ends."""
    procs: list[subprocess.Popen] = []

    def hold(folder: Path) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(folder / OWNER_LOCK)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_folder_whose_lock_is_held_stays_though_its_pid_looks_dead(tmp_path, holder):
    """What another PID namespace sharing the temporary folder sees: the driver's pid is not alive here, but
    it holds its folder's lock.  The folder goes once nobody holds it."""
    folder = tmp_path / f"fuzzdist-pool-{_dead_pid()}-abc"
    folder.mkdir()
    (folder / "store.1").write_text("x")
    owner = holder(folder)
    assert remove_leftovers(tmp_path) == [] and (folder / "store.1").exists()
    owner.kill()
    owner.wait()
    assert remove_leftovers(tmp_path) == [str(folder)] and not folder.exists()


def test_only_this_users_provably_dead_folders_go(tmp_path):
    dead = _leftover(tmp_path / "fuzzdist-pool-abc")
    (dead / "store").mkdir()
    (dead / "store" / "file").write_text("x")
    mine = make_owned_dir(POOL_DIR_PREFIX, dir=tmp_path)  # this process holds it
    unlocked = tmp_path / f"fuzzdist-pool-{_dead_pid()}-xyz"  # being made, or an older fuzzdist's: left alone
    unlocked.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("keep")
    (elsewhere / OWNER_LOCK).touch()
    link = tmp_path / "fuzzdist-pool-link"
    link.symlink_to(elsewhere)  # a planted link: never followed, never removed
    try:
        assert remove_leftovers(tmp_path) == [str(dead)]
        assert not dead.exists() and os.path.isdir(mine.path) and unlocked.exists()
        assert link.is_symlink() and (elsewhere / "keep").read_text() == "keep"
    finally:
        mine.release()
    assert remove_leftovers(tmp_path) == [mine.path]


def test_a_planted_lock_link_is_not_followed(tmp_path):
    target = tmp_path / "target"
    target.write_text("x")
    folder = tmp_path / "fuzzdist-pool-abc"
    folder.mkdir()
    (folder / OWNER_LOCK).symlink_to(target)
    assert remove_leftovers(tmp_path) == [] and folder.exists() and target.read_text() == "x"


def test_a_folder_owned_by_another_user_is_left(tmp_path, monkeypatch):
    folder = _leftover(tmp_path / "fuzzdist-pool-abc")
    monkeypatch.setattr(leftovers.os, "getuid", lambda: os.stat(folder).st_uid + 1)
    assert remove_leftovers(tmp_path) == [] and folder.exists()


@pytest.mark.parametrize("name", ["fuzzdist-junit-abc", "fuzzdist-jobs-abc", "fuzzdist-torchrun-abc", "pymp-abc"])
def test_a_dead_runs_junit_jobs_and_multiprocessing_folders_go(tmp_path, holder, name):
    dead = _leftover(tmp_path / name)
    live = tmp_path / f"{name}-live"
    live.mkdir()
    holder(live)
    plain = tmp_path / f"{name}-plain"  # no lock file: not provably fuzzdist's (another program's pymp-*)
    plain.mkdir()
    assert remove_leftovers(tmp_path) == [str(dead)]
    assert live.exists() and plain.exists()


def test_a_folder_kept_for_the_user_is_never_a_leftover(tmp_path):
    kept = make_owned_dir("r.json.workers-", dir=tmp_path)
    kept.keep()
    assert remove_leftovers(tmp_path) == [] and os.path.isdir(kept.path)
    assert os.listdir(kept.path) == []


def test_a_new_folder_taken_by_a_cleaner_first_is_made_again(tmp_path, monkeypatch):
    """Another run's cleaner may take a new folder's lock before its maker does (between the lock file's
    creation and its flock): the maker sees it and makes another folder."""
    real = leftovers._hold
    calls: list[str] = []

    def cleaner_first(folder: str):
        calls.append(folder)
        if len(calls) == 1:
            lock = os.path.join(folder, OWNER_LOCK)
            open(lock, "w").close()
            assert leftovers._remove_if_dead(folder)  # the cleaner wins the race
        return real(folder)

    monkeypatch.setattr(leftovers, "_hold", cleaner_first)
    owned = make_owned_dir(POOL_DIR_PREFIX, dir=tmp_path)
    try:
        assert len(calls) == 2 and owned.path == calls[1] and os.path.isdir(owned.path)
        assert remove_leftovers(tmp_path) == []  # it holds its lock
    finally:
        owned.release()


# -- a rank's os._exit ------------------------------------------------------------------------------

EXITS = """
import multiprocessing.util, os, sys
from fuzzdist.pool.leftovers import before_os_exit
print(multiprocessing.util.get_temp_dir(), flush=True)  # what file_descriptor sharing makes
if sys.argv[1] == "clean":
    before_os_exit()
os._exit(0)
"""


@pytest.mark.parametrize("clean", [False, True])
def test_before_os_exit_removes_what_multiprocessing_made(tmp_path, clean):
    env = dict(cli_env(), TMPDIR=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", EXITS, "clean" if clean else "plain"],
        env=env,
        text=True,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.strip().startswith(str(tmp_path / "pymp-"))
    assert os.path.exists(out.strip()) != clean  # without it, os._exit leaves the folder


# -- whole runs ------------------------------------------------------------------------------------

PLAIN = """
from hypothesis import given, strategies as st

def echo(ctx, k):
    return k

@given(k=st.integers(0, 10**9))
def test_plain(rank_pool, k):
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size
"""

SHARING = """
from hypothesis import given, strategies as st

def share(ctx, k):
    import torch
    import torch.multiprocessing as tmp
    from multiprocessing.reduction import ForkingPickler

    tmp.set_sharing_strategy("file_descriptor")  # the rank's resource sharer makes a pymp-* folder
    ForkingPickler.dumps(torch.zeros(4).share_memory_())
    return k

@given(k=st.integers(0, 10**9))
def test_sharing(rank_pool, k):
    assert rank_pool.run(share, k) == [k] * rank_pool.world_size
"""


def _run(tmp_path, source, how, **environ):
    """``fuzzdist run`` with its own TMPDIR, ended as ``how`` says; what it left there."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    write(tmp_path, "test_leftover_prop.py", source)
    env = dict(cli_env(), TMPDIR=str(temp), **environ)
    budget = ["--max-examples", "20"] if how == "end" else ["--duration", "300s"]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            "test_leftover_prop.py",
            *budget,
            "--report",
            "r.json",
            "--junit",
            "j.xml",
            "--progress",
            "none",
            "--database",
            str(tmp_path / "db"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        if how != "end":
            wait_for_report(
                tmp_path / "r.json", lambda r: sum(p["examples"] for p in r["properties"]) >= 1, proc, timeout=300
            )
            proc.send_signal(signal.SIGINT if how == "SIGINT" else signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10  # ranks end a moment after the driver
    while time.monotonic() < deadline and any(temp.iterdir()):
        time.sleep(0.2)
    return sorted(str(p.relative_to(temp)) for p in temp.rglob("*")), out


@pytest.mark.parametrize("how", ["end", "SIGINT", "SIGTERM"])
def test_a_run_leaves_no_temporary_file(tmp_path, how):
    left, out = _run(tmp_path, PLAIN, how)
    assert left == [], out[-3000:]


@pytest.mark.parametrize(
    "start",
    [
        "auto",  # CPU ranks forked from the fork server
        "spawn",  # a spawned rank ends with os._exit: leftovers.before_os_exit() runs multiprocessing's finalizers
    ],
)
def test_a_rank_that_shared_by_file_descriptor_leaves_no_pymp_folder(tmp_path, start):
    left, out = _run(tmp_path, SHARING, "end", FUZZDIST_START_METHOD=start)
    assert left == [], out[-3000:]


def test_a_torchrun_run_leaves_no_temporary_file(tmp_path):
    """Each rank's fuzzdist-torchrun-* folder, the one-node secret and its folder: all gone at the end."""
    import shutil
    import socket

    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    temp = tmp_path / "tmp"
    temp.mkdir()
    write(tmp_path, "test_leftover_prop.py", PLAIN)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(cli_env(), TMPDIR=str(temp), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            torchrun,
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            "--max-restarts",
            "0",
            "-m",
            "fuzzdist",
            "run",
            "test_leftover_prop.py",
            "--max-examples",
            "5",
            "--world-size",
            "2",
            "--report",
            "r.json",
            "--junit",
            "",
            "--database",
            "db",
            "--progress",
            "none",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    # torchrun's agent keeps its own logs (torchelastic_*): torch's, not fuzzdist's
    left = sorted(
        str(p.relative_to(temp))
        for p in temp.rglob("*")
        if not p.relative_to(temp).parts[0].startswith("torchelastic_")
    )
    assert left == [], left


def test_the_next_pool_removes_the_folder_of_a_sigkilled_driver(tmp_path):
    """A SIGKILLed driver can't remove its pool's folder: the next pool to start (another driver) does."""
    import json
    import select

    helpers = Path(__file__).resolve().parents[1] / "helpers"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    driver = subprocess.Popen(
        [sys.executable, str(helpers / "process_tree_driver.py")], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert select.select([driver.stdout], [], [], 120)[0], "the driver printed nothing within 120s"
        tree = [pid for ranks in json.loads(driver.stdout.readline()) for pid in ranks.values()]
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("fuzzdist-pool-")], "no pool folder"
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)
    assert descendants.wait_all_dead(tree) == []
    code = "from fuzzdist import RankPool\nif __name__ == '__main__':\n    RankPool(1, spares='never').start().close()"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("fuzzdist-pool-")] == []


def test_the_next_run_removes_what_a_sigkilled_run_left(tmp_path):
    """A SIGKILLed ``fuzzdist run`` leaves its pool's folder, its JUnit folder and its multiprocessing folder
    (the fork server's socket): the next run removes all three, and leaves nothing of its own."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    write(tmp_path, "test_leftover_prop.py", PLAIN)
    env = dict(cli_env(), TMPDIR=str(temp), FUZZDIST_START_METHOD="forkserver")
    killed = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            "test_leftover_prop.py",
            "--duration",
            "300s",
            "--report",
            "r.json",
            "--junit",
            "j.xml",
            "--html",
            "",
            "--progress",
            "none",
            "--database",
            str(tmp_path / "db"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_report(
            tmp_path / "r.json", lambda r: sum(p["examples"] for p in r["properties"]) >= 1, killed, timeout=300
        )
        killed.kill()
        killed.wait(30)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    left = sorted(p.name for p in temp.iterdir())
    for prefix in ("fuzzdist-pool-", "fuzzdist-junit-", "pymp-"):
        assert any(name.startswith(prefix) for name in left), left
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            "test_leftover_prop.py",
            "--max-examples",
            "3",
            "--report",
            "",
            "--junit",
            "j.xml",
            "--html",
            "",
            "--progress",
            "none",
            "--database",
            str(tmp_path / "db"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    deadline = time.monotonic() + 10  # the fork server ends a moment after its driver
    while time.monotonic() < deadline and any(temp.iterdir()):
        time.sleep(0.2)
    assert sorted(p.name for p in temp.iterdir()) == []


def _can_unshare_pids() -> bool:
    import shutil

    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


IN_OTHER_NAMESPACE = """
import os, sys
from fuzzdist import RankPool
if __name__ == "__main__":
    pool = RankPool(1, spares="never").start()
    print(os.getpid(), pool._tmpdir, flush=True)
    sys.stdin.read()
    pool.close()
"""


NEXT_POOL = "from fuzzdist import RankPool\nif __name__ == '__main__':\n    RankPool(1, spares='never').start().close()"


def _free_pids_here(count: int = 200) -> int:
    """The first of ``count`` pids in a row that no process has in this namespace (above the low ones)."""
    taken = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    start = 500
    while any(pid in taken for pid in range(start, start + count)):
        start += count
    return start


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _can_unshare_pids(),
    reason="needs unshare --pid (Linux, with the right to make namespaces)",
)
def test_a_pool_in_another_pid_namespace_keeps_its_folder(tmp_path):
    """Containers sharing /tmp: a live driver in another PID namespace has a pid that is no process here, so
    it looks dead from here; the next pool here leaves its folder all the same."""
    import select

    env = dict(cli_env(), TMPDIR=str(tmp_path))
    start = _free_pids_here()
    # Inside, pids count from 1: use some up, so that the driver's pid there is none here.
    inside = f"while [ \"$(sh -c 'echo $$')\" -lt {start} ]; do :; done; \"{sys.executable}\" -c '{IN_OTHER_NAMESPACE}'"
    other = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c", inside],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert other.stdout is not None and select.select([other.stdout], [], [], 240)[0], "no pool within 240s"
        pid, path = other.stdout.readline().split()
        folder = Path(path)
        assert folder.parent == tmp_path and folder.is_dir()
        assert start <= int(pid) < start + 200 and not os.path.exists(f"/proc/{pid}")  # dead, seen from here
        subprocess.run([sys.executable, "-c", NEXT_POOL], env=env, check=True, timeout=300)
        assert folder.is_dir() and any(folder.iterdir()), "the live pool's folder was removed"
    finally:
        assert other.stdin is not None
        other.stdin.close()  # the other pool closes; --kill-child ends the namespace if it has not by then
        try:
            other.wait(60)
        except subprocess.TimeoutExpired:
            other.kill()
            other.wait(30)


# -- a rank's own multiprocessing folder ----------------------------------------------------------

SHARE_THEN_DIE = """
import os, signal, sys
from fuzzdist import RankCrash, RankPool

def share_then_die(ctx, note):
    import torch
    import torch.multiprocessing as tmp
    from multiprocessing import util
    from multiprocessing.reduction import ForkingPickler

    tmp.set_sharing_strategy("file_descriptor")  # the resource sharer's socket goes in the rank's pymp-*
    ForkingPickler.dumps(torch.zeros(4).share_memory_())
    with open(note, "w") as f:
        f.write(util.get_temp_dir())
    os.kill(os.getpid(), signal.SIGKILL)

def echo(ctx, k):
    return k

if __name__ == "__main__":
    pool = RankPool(1, spares="never", start_method="spawn").start()
    try:
        pool.run(share_then_die, sys.argv[1])
    except RankCrash:
        pass
    assert pool.run(echo, 7) == [7]  # on fresh ranks: the pool restarted
    print(open(sys.argv[1]).read(), os.path.exists(open(sys.argv[1]).read()), flush=True)
    pool.close()
"""


@pytest.fixture
def short_tmp():
    """A temporary folder with a short path: a socket's path (the resource sharer's) must fit AF_UNIX's
    108 bytes, which pytest's own tmp_path can pass."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="fdl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_sigkilled_ranks_multiprocessing_folder_goes_at_the_pools_restart(tmp_path, short_tmp):
    """A spawned rank makes its own pymp-* folder (its driver has none to hand down); SIGKILLed, it can't
    remove it: the pool's restart does, since the rank owned it from its start."""
    temp = short_tmp
    env = dict(cli_env(), TMPDIR=str(temp))
    write(tmp_path, "share_then_die.py", SHARE_THEN_DIE)
    out = subprocess.run(
        [sys.executable, "share_then_die.py", str(tmp_path / "note")],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    folder, exists = out.stdout.split()
    assert Path(folder).parent == temp and Path(folder).name.startswith("pymp-")
    assert exists == "False", "the dead rank's folder was still there after the restart"
    assert sorted(p.name for p in temp.iterdir()) == []


INHERITED = """
import multiprocessing as mp, os, sys
from multiprocessing import util
from fuzzdist.pool import leftovers

def child(q):
    q.put((util.get_temp_dir(), leftovers.own_multiprocessing_temp_dir()))

if __name__ == "__main__":
    parent = util.get_temp_dir()  # made here, not owned: handed down to the child
    q = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=child, args=(q,))
    p.start()
    got = q.get(timeout=120)
    p.join(120)
    lock_file = os.path.exists(os.path.join(parent, leftovers.OWNER_LOCK))
    print(parent, *got, lock_file, leftovers.own_multiprocessing_temp_dir())
"""


def test_a_child_never_owns_the_multiprocessing_folder_it_inherited(tmp_path):
    """A child of multiprocessing uses its parent's pymp-* folder: owning it, its lock would go when the
    child ends, and a cleaner would remove the folder under the live parent.  Only its maker owns it."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    write(tmp_path, "inherited.py", INHERITED)
    env = dict(cli_env(), TMPDIR=str(temp))
    out = subprocess.run(
        [sys.executable, "inherited.py"], cwd=tmp_path, env=env, text=True, capture_output=True, timeout=300, check=True
    ).stdout.split()
    parent, in_child, owned_by_child, lock_file, owned_by_parent = out
    assert in_child == parent and owned_by_child == "None" and lock_file == "False"
    assert owned_by_parent == parent  # its maker may
