"""How a RankPool starts its ranks: forked from multiprocessing's fork server where that is safe, spawned
elsewhere, and a spare set kept ready once the pool has restarted."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time

import pytest
from helpers import descendants, rank_fns

from fuzzdist import RankCrash, RankPool
from fuzzdist.errors import InvalidArgument
from fuzzdist.pool import starting

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is used on Linux")


@linux_only
def test_auto_forks_cpu_pools_and_spawns_cuda_pools(monkeypatch):
    monkeypatch.delenv(starting.ENV_VAR, raising=False)
    monkeypatch.setattr(starting, "fork_server_fits", lambda: None)  # the environment rule: its own test below
    assert starting.resolve_start_method("auto", "cpu") == "forkserver"
    assert starting.resolve_start_method("auto", "cuda") == "spawn"  # a CUDA context does not survive a fork
    monkeypatch.setenv(starting.ENV_VAR, "spawn")
    assert starting.resolve_start_method("auto", "cpu") == "spawn"
    assert starting.resolve_start_method("forkserver", "cpu") == "forkserver"  # an argument beats the variable
    monkeypatch.setenv(starting.ENV_VAR, "forkserver")
    assert starting.resolve_start_method("auto", "cuda") == "spawn", "the variable must not fork CUDA pools"


@pytest.mark.parametrize(
    ("method", "device", "env", "message"),
    [
        ("fork", "cpu", None, "start_method='fork': expected one of auto, spawn, forkserver"),
        ("forkserver", "cuda", None, "CUDA pools start their ranks with spawn"),
        ("auto", "cpu", "fork", "FUZZDIST_START_METHOD='fork': expected spawn or forkserver"),
    ],
)
def test_a_bad_start_method_is_one_clear_error(monkeypatch, method, device, env, message):
    if env is None:
        monkeypatch.delenv(starting.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(starting.ENV_VAR, env)
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        starting.resolve_start_method(method, device)
    with pytest.raises(InvalidArgument, match="spares='sometimes': expected one of auto, always, never"):
        starting.validate_spares("sometimes")


def test_the_spares_variable_decides_for_auto_only(monkeypatch):
    monkeypatch.setenv(starting.SPARES_VAR, "never")
    assert starting.validate_spares("auto") == "never"
    assert starting.validate_spares("always") == "always"
    monkeypatch.setenv(starting.SPARES_VAR, "some")
    with pytest.raises(InvalidArgument, match="FUZZDIST_SPARES='some': expected never, always or auto"):
        starting.validate_spares("auto")


@linux_only
def test_forked_ranks_are_children_of_a_server_that_never_touched_cuda(forkable):
    with RankPool(2, timeout=20, start_method="forkserver", spares="never") as pool:
        facts = pool.run(rank_fns.start_facts)
    assert [f["rank"] for f in facts] == [0, 1]
    assert {f["ppid"] for f in facts} != {os.getpid()}, "the ranks were not forked by the server"
    assert len({f["ppid"] for f in facts}) == 1
    assert not any(f["cuda_initialized"] for f in facts)


def test_a_restart_puts_the_spare_set_in_place_and_starts_another():
    with RankPool(2, timeout=20, spares="auto") as pool:
        pool.run(rank_fns.whoami)
        assert pool.spare_pids == []  # no spare before the first restart: most pools never restart
        with pytest.raises(RankCrash):
            pool.run(rank_fns.die_on, 1, "exit")
        spares = pool.spare_pids
        assert len(spares) == 2 and not set(spares) & set(pool.pids)
        with pytest.raises(RankCrash):
            pool.run(rank_fns.die_on, 0, "exit")
        assert pool.pids == spares, "the second restart did not use the spare set"
        assert pool.run(rank_fns.broadcast_sum, 5, 1) == [10.0, 10.0]  # the spares joined a working group
        assert len(pool.spare_pids) == 2 and not set(pool.spare_pids) & set(spares)


def test_a_spare_that_dies_is_replaced():
    with RankPool(2, timeout=20, spares="always") as pool:
        pool.run(rank_fns.whoami)
        first = pool.spare_pids
        assert len(first) == 2
        os.kill(first[1], signal.SIGKILL)
        assert descendants.wait_all_dead([first[1]]) == []
        time.sleep(0.2)  # the sentinel reports the death
        assert pool.run(rank_fns.whoami)[0][0] == 0  # the serving ranks are unaffected
        assert pool.spares_replaced == 1
        second = pool.spare_pids
        assert len(second) == 2 and not set(second) & set(first)
        assert descendants.wait_all_dead([first[0]]) == [], "the dead spare's partner was left running"
        with pytest.raises(RankCrash):
            pool.run(rank_fns.die_on, 0, "exit")
        assert pool.pids == second
        assert pool.run(rank_fns.broadcast_sum, 4, 0) == [6.0, 6.0]


def test_spares_never_keeps_none():
    with RankPool(2, timeout=20, spares="never") as pool:
        with pytest.raises(RankCrash):
            pool.run(rank_fns.die_on, 1, "exit")
        assert pool.spare_pids == []
        assert pool.run(rank_fns.whoami)[1][0] == 1


@linux_only
def test_memory_is_reported_for_ranks_and_spares():
    with RankPool(2, timeout=20, spares="always") as pool:
        pool.run(rank_fns.whoami)
        memory = pool.memory()
    assert len(memory["ranks"]) == 2 and len(memory["spares"]) == 2
    assert all(isinstance(m, int) and m > 1 << 20 for m in memory["ranks"] + memory["spares"]), memory


def test_spawn_still_works_everywhere_auto_would_not_fork():
    assert "spawn" in mp.get_all_start_methods()
    with RankPool(2, timeout=20, start_method="spawn", spares="never") as pool:
        facts = pool.run(rank_fns.start_facts)
    assert {f["ppid"] for f in facts} == {os.getpid()}


ENV_SCRIPT = """
import os, sys
from fuzzdist import RankPool
from fuzzdist.errors import InvalidArgument
from fuzzdist.pool import starting
sys.path.insert(0, sys.argv[1])
from helpers import rank_fns

if __name__ == "__main__":
    with RankPool(2, timeout=20, spares="never") as pool:
        assert pool.start_method == "forkserver", pool.start_method
    os.environ["FUZZDIST_PLANTED_SETTING"] = "1"  # as a test that sets TORCH_DISTRIBUTED_DEBUG would
    with RankPool(2, timeout=20, spares="never") as pool:
        assert pool.start_method == "spawn", "auto forked ranks that would not see the new variable"
        seen = pool.run(rank_fns.read_env, "FUZZDIST_PLANTED_SETTING")
        assert seen == ["1", "1"], seen
    try:
        RankPool(2, start_method="forkserver")
    except InvalidArgument as e:
        assert "FUZZDIST_PLANTED_SETTING" in str(e), e
    else:
        raise AssertionError("an explicit forkserver pool was allowed under another environment")
    del os.environ["FUZZDIST_PLANTED_SETTING"]
    with RankPool(2, timeout=20, spares="never") as pool:
        assert pool.start_method == "forkserver", "the environment is back: auto forks again"
    print("ok")
"""


@linux_only
def test_a_pool_spawns_once_the_environment_differs_from_the_fork_servers(tmp_path):
    """Forked ranks inherit the server's environment: a changed one must reach the ranks, by spawning them."""
    import subprocess

    script = tmp_path / "env_driver.py"
    script.write_text(ENV_SCRIPT)
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != starting.ENV_VAR}
    done = subprocess.run(
        [sys.executable, str(script), tests_dir], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


STDOUT_SCRIPT = """
import os, sys
sys.path.insert(0, sys.argv[1])
from fuzzdist import RankPool
from helpers import rank_fns

if __name__ == "__main__":
    RankPool(1, timeout=20, spares="never").start().close()  # the fork server starts, on this stdout
    out = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)  # as pytest's capture does for each test
    with RankPool(2, timeout=20, spares="never", rank_output="live") as pool:
        assert pool.start_method == "forkserver"
        pool.run(rank_fns.say, "planted-line")
"""


@linux_only
def test_live_output_of_forked_ranks_goes_where_the_drivers_stdout_is_now(tmp_path):
    """Not to the stdout the fork server was started with."""
    import subprocess

    script = tmp_path / "stdout_driver.py"
    script.write_text(STDOUT_SCRIPT)
    target = tmp_path / "now.txt"
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k not in (starting.ENV_VAR, starting.SPARES_VAR)}
    done = subprocess.run(
        [sys.executable, str(script), tests_dir, str(target)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text().count("planted-line") == 2, (target.read_text(), done.stdout)
    assert "planted-line" not in done.stdout


@linux_only
def test_a_fork_server_that_can_not_start_falls_back_to_spawn(tmp_path):
    """Its socket lives in the temporary folder: a TMPDIR past AF_UNIX's 108 bytes can't hold it."""
    import subprocess

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    code = (
        "import warnings\nfrom fuzzdist import RankPool\nif __name__ == '__main__':\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        with RankPool(2, timeout=20, spares='never') as pool:\n"
        "            assert pool.start_method == 'spawn', pool.start_method\n"
        "    assert any('starting rank processes with spawn' in str(w.message) for w in caught), caught\n"
        "    with RankPool(1, timeout=20, spares='never') as pool:\n"
        "        assert pool.start_method == 'spawn'  # decided up front from now on\n"
        "    print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in (starting.ENV_VAR, starting.SPARES_VAR)}
    env["TMPDIR"] = str(deep)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


CAMPAIGN_PROPERTY = """
from hypothesis import given, strategies as st
from fuzzdist.pool import starting

@given(a=st.integers(0, 3))
def test_pools_fork(rank_pool, a):
    assert rank_pool.start_method == "forkserver", (rank_pool.start_method, starting.fork_server_fits())
"""


@linux_only
def test_a_campaigns_pools_fork_from_the_server_it_started(tmp_path):
    """fuzzdist run starts the server before pytest does, which then sets PYTEST_VERSION: not a change
    that makes the campaign's pools spawn."""
    import subprocess

    from helpers.cli_helpers import cli_env, write

    write(tmp_path, "test_fork_prop.py", CAMPAIGN_PROPERTY)
    # As from a shell: this test runs under pytest, whose PYTEST_* variables the command must not inherit.
    env = {k: v for k, v in cli_env().items() if not k.startswith("PYTEST_") and k != starting.ENV_VAR}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            "test_fork_prop.py",
            "--max-examples",
            "3",
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
    assert done.returncode == 0, done.stdout + done.stderr
