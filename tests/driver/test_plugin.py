"""The pytest plugin: pools per marker, shared across tests, precise skips, options, profiles."""

from __future__ import annotations

import pytest
import torch

HAS_GPU = torch.cuda.is_available()

RANK_FNS = """
import os
def info(ctx):
    return (ctx.rank, ctx.world_size, os.getpid())
def fail_on_1(ctx, n):
    if ctx.rank == 1 and n >= 3:
        raise ValueError(f"planted: n={n}")
"""


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(rankfns=RANK_FNS)
    return pytester


@pytest.mark.skipif(HAS_GPU, reason="checks the skip reason on a machine without a GPU")
def test_device_list_parametrizes_and_cuda_skips_with_reason(suite):
    suite.makepyfile(
        test_prop="""
import pytest, rankfns
@pytest.mark.fuzzdist(device=["cpu", "cuda"])
def test_p(rank_pool):
    assert [r[0] for r in rank_pool.run(rankfns.info)] == [0, 1]
"""
    )
    result = suite.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*gpu property needs CUDA*"])


def test_world_size_option_and_shared_pool(suite):
    suite.makepyfile(
        test_prop="""
import rankfns
PIDS = []
def test_a(rank_pool):
    out = rank_pool.run(rankfns.info)
    assert [r[:2] for r in out] == [(0, 3), (1, 3), (2, 3)]
    PIDS.append([r[2] for r in out])
def test_b(rank_pool):
    PIDS.append([r[2] for r in rank_pool.run(rankfns.info)])
    assert PIDS[0] == PIDS[1], "the pool was not reused across tests"
"""
    )
    suite.runpytest("--fuzzdist-world-size=3", "-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_marker_world_sizes_parametrize(suite):
    suite.makepyfile(
        test_prop="""
import pytest, rankfns
@pytest.mark.fuzzdist(world_size=[1, 3])
def test_p(rank_pool):
    assert len(rank_pool.run(rankfns.info)) == rank_pool.world_size
"""
    )
    result = suite.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_p?cpu-w1?*PASSED*", "*test_p?cpu-w3?*PASSED*"])


@pytest.mark.skipif(torch.cuda.device_count() >= 8, reason="machine has 8 GPUs")
def test_gpu_markers_skip_with_precise_reason(suite):
    suite.makepyfile(
        test_prop="""
import pytest
@pytest.mark.multi_gpu(n=8, why="one GPU per rank")
def test_needs_8():
    pass
@pytest.mark.gpu
def test_needs_1():
    pass
"""
    )
    result = suite.runpytest("-rs", "-p", "no:cacheprovider")
    if HAS_GPU:
        result.assert_outcomes(passed=1, skipped=1)
    else:
        result.assert_outcomes(skipped=2)
        result.stdout.fnmatch_lines(["*gpu property needs CUDA*"])
    result.stdout.fnmatch_lines(["*multi_gpu property needs*"])


def test_a_multi_gpu_skip_says_why_too_few_gpus_matter(monkeypatch):
    from fuzzdist.driver import plugin

    monkeypatch.setattr(plugin, "missing_gpus", lambda n: f"needs {n} GPUs, but 1 is visible")
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert plugin._multi_gpu_skip_reason(2, "NCCL refuses two ranks on one GPU") == (
        "multi_gpu property needs 2 GPUs, but 1 is visible: NCCL refuses two ranks on one GPU"
    )
    assert plugin._multi_gpu_skip_reason(2, None) == "multi_gpu property needs 2 GPUs, but 1 is visible"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(plugin, "missing_gpus", lambda n: "needs CUDA, but no GPU is visible")
    assert plugin._multi_gpu_skip_reason(2, "NCCL refuses two ranks on one GPU") == (
        "multi_gpu property needs CUDA, but no GPU is visible"
    )
    monkeypatch.setattr(plugin, "missing_gpus", lambda n: None)
    assert plugin._multi_gpu_skip_reason(2, "anything") is None


def test_failing_property_is_shrunk_and_names_the_rank(suite):
    suite.makepyfile(
        test_prop="""
import rankfns
from hypothesis import given, strategies as st
@given(n=st.integers(0, 1000))
def test_p(rank_pool, n):
    rank_pool.run(rankfns.fail_on_1, n)
"""
    )
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*rank 1 raised*planted: n=3*", "*n=3,*"])


def test_what_the_ranks_lack_skips_the_test_with_the_reason(suite):
    """A CapabilityError from a probe inside the test (pool.capabilities.probed_once) is a skip, asked
    once per pool: the second test gets the kept answer without probing again."""
    suite.makepyfile(
        test_prop="""
import pytest
from hypothesis import given, strategies as st
from fuzzdist.errors import CapabilityError
from fuzzdist.pool.capabilities.per_pool import probed_once
PROBES = []
def probe():
    PROBES.append(1)
    raise CapabilityError("planted: this gloo has no frobnicate")
@pytest.mark.parametrize("k", [1, 2])
@given(n=st.integers(0, 10))
def test_p(rank_pool, k, n):
    probed_once(rank_pool, "frobnicate", probe)
def test_probed_once():
    assert PROBES == [1]
"""
    )
    result = suite.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2, passed=1)
    result.stdout.fnmatch_lines(["*SKIPPED*planted: this gloo has no frobnicate*"])


def test_bad_marker_argument_is_a_usage_error(suite):
    suite.makepyfile(
        test_prop="""
import pytest
@pytest.mark.fuzzdist(worldsize=2)
def test_p(rank_pool):
    pass
"""
    )
    result = suite.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*unknown fuzzdist marker arguments*worldsize*"])
    assert result.ret != 0


def test_profiles_are_registered_and_deadline_is_off(suite):
    suite.makepyfile(
        test_prop="""
from hypothesis import settings
from fuzzdist.compat.hypothesis_internals import current_profile_name
def test_profile():
    assert current_profile_name() == "ci"
    assert settings.default.deadline is None
    assert settings.default.max_examples == 20
    for name in ("ci", "dev", "campaign", "replay"):
        assert settings.get_profile(name).deadline is None
"""
    )
    suite.runpytest("--hypothesis-profile=ci", "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_default_profile_has_no_deadline(suite, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    suite.makepyfile(
        test_prop="""
from hypothesis import settings
from fuzzdist.compat.hypothesis_internals import current_profile_name
def test_profile():
    assert current_profile_name() == "dev" and settings.default.deadline is None
"""
    )
    suite.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_ci_profile_keeps_the_database_on_a_ci_machine(suite, monkeypatch):
    """Hypothesis loads its own 'ci' profile (no database) when CI is set; fuzzdist's must not inherit it."""
    monkeypatch.setenv("CI", "true")
    suite.makepyfile(
        test_prop="""
from hypothesis import settings
from fuzzdist.compat.hypothesis_internals import current_profile_name
def test_profile():
    assert current_profile_name() == "ci"
    assert settings.default.database is not None
    assert settings.default.derandomize is False
"""
    )
    suite.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_conftest_supplies_the_pool_cache_through_the_hook(suite):
    """pytest_fuzzdist_make_pool_cache (fuzzdist.driver.newhooks): the first non-None result is the session's
    rank_pools; rank_pool gets its pools from it, and it is closed once at the end of the session."""
    suite.makeconftest('''
import pathlib

class InlinePool:
    """Runs a call once, in this process, as rank 0 of 1: a stand-in for a real transport."""
    world_size = 1
    def run(self, fn, *args, **kwargs):
        return [fn(None, *args, **kwargs)]

class InlinePools:
    def get(self, key):
        return InlinePool()
    def close(self):
        pathlib.Path("closed").write_text("yes")

def pytest_fuzzdist_make_pool_cache(config):
    return InlinePools()
''')
    suite.makepyfile(
        test_prop="""
def add_one(ctx, x):
    return x + 1

def test_p(rank_pool, rank_pools):
    assert type(rank_pools).__name__ == "InlinePools"
    assert rank_pool.run(add_one, 1) == [2]
"""
    )
    suite.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (suite.path / "closed").read_text() == "yes"


def test_each_pool_variant_keeps_its_own_failures_in_the_database(suite):
    """[cpu-w1] and [cpu-w2] come from pytest_generate_tests, not a parametrize marker: fuzzdist gives
    each its own database key.  With one shared key, running w1 replayed w2's failure, saw it pass
    and deleted it from the database."""
    suite.makepyfile(
        test_prop="""
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

@pytest.mark.fuzzdist(world_size=[1, 2])
@settings(database=DirectoryBasedExampleDatabase("db"), max_examples=50)
@given(n=st.integers(0, 10))
def test_p(rank_pool, n):
    assert not (rank_pool.world_size == 2 and n >= 3)
"""
    )
    suite.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1, failed=1)
    suite.runpytest("-p", "no:cacheprovider", "-k", "w1").assert_outcomes(passed=1)
    # Replay only (no generation): w2 fails again only if its stored failure survived the w1 run.
    replay = suite.runpytest("-p", "no:cacheprovider", "-k", "w2", "--hypothesis-profile=replay")
    replay.assert_outcomes(failed=1)


# -- databases written under the key every pool variant shared (before each had its own) --------

SHARED_KEY_PROP = """
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

@pytest.mark.fuzzdist(world_size=[1, 2])
@settings(database=DirectoryBasedExampleDatabase("db"), max_examples=20)
@given(n=st.integers(0, 10**6))
def test_p(rank_pool, n):
    assert not (rank_pool.world_size == 2 and n == 123456), "planted: w2 fails at n=123456"
"""

# Run as a script: `seed` stores n=123456 under the shared key, the key Hypothesis used for every variant
# before fuzzdist gave each its own; prints what each key holds (hex entries), as JSON.
SHARED_KEY_DB = """
import json, sys
from hypothesis.database import DirectoryBasedExampleDatabase, choices_to_bytes
from fuzzdist.compat.hypothesis_internals import digest_with
import test_prop

inner = test_prop.test_p.hypothesis.inner_test
keys = {"shared": digest_with(inner, None),
        "w1": digest_with(inner, b"test_prop.py::test_p[cpu-w1]"),
        "w2": digest_with(inner, b"test_prop.py::test_p[cpu-w2]")}
db = DirectoryBasedExampleDatabase("db")
if sys.argv[1:] == ["seed"]:
    db.save(keys["shared"], choices_to_bytes([123456]))
print(json.dumps({"keys": {name: key.hex() for name, key in keys.items()},
                  "entries": {name: [e.hex() for e in db.fetch(key)] for name, key in keys.items()}}))
"""


def _shared_key_db(suite, *args):
    """{"keys": name -> hex, "entries": name -> [hex entries]} for the shared, w1 and w2 keys."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "shared_key_db.py", *args],
        cwd=suite.path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.fixture
def shared_key_suite(suite):
    """A property with [cpu-w1] and [cpu-w2] variants and a database holding n=123456 (a failure at w2 only)
    under the key both variants shared, and nothing under their own keys."""
    suite.makepyfile(test_prop=SHARED_KEY_PROP, shared_key_db=SHARED_KEY_DB)
    db = _shared_key_db(suite, "seed")
    assert db["entries"]["shared"] and not db["entries"]["w1"] and not db["entries"]["w2"]
    return suite, db


def test_a_variant_adopts_what_the_shared_key_holds_once_and_says_so(shared_key_suite):
    suite, db = shared_key_suite
    stored = db["entries"]["shared"]
    # Replay only (no generation): w2 fails only if it replays the example stored under the shared key.
    result = suite.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=replay")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*fuzzdist: examples from the shared database key*",
            f"test_prop.py::test_p?cpu-w1?: its own database key held nothing; replaying the 1 example(s) stored "
            f"under the key its pool variants shared before each had its own ({db['keys']['shared']})*",
            "test_prop.py::test_p?cpu-w2?: its own database key held nothing*",
        ]
    )
    after = _shared_key_db(suite)["entries"]
    assert after["shared"] == stored  # kept for the other variants
    assert after["w2"] == stored  # w2's own key holds its failure now
    assert after["w1"] == []  # it passed at w1: Hypothesis deleted it from w1's key
    # Once: w2 replays from its own key now, and w1 (its key empty again) doesn't adopt it a second time:
    # with nothing to replay, Hypothesis skips it under the replay profile.
    again = suite.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=replay", "-rs")
    again.assert_outcomes(skipped=1, failed=1)
    assert "shared database key" not in again.stdout.str()
    assert _shared_key_db(suite)["entries"] == after


def test_fuzzdist_replay_reads_the_shared_key_and_changes_nothing(shared_key_suite):
    from helpers.cli_helpers import run_cli

    suite, db = shared_key_suite
    result = run_cli(["replay", "test_prop.py", "--database", "db"], cwd=suite.path)
    assert result.returncode == 1, result.stdout + result.stderr  # w2's stored failure still fails
    for variant in ("w1", "w2"):
        assert (
            f"SHARED KEY      test_prop.py::test_p[cpu-{variant}]: its own database key holds nothing; "
            f"replaying the 1 failure(s) stored under the key its pool variants shared before each had its "
            f"own ({db['keys']['shared']})"
        ) in result.stdout, result.stdout
    assert "FAILS           test_prop.py::test_p[cpu-w2] (stored failure 1 of 1)" in result.stdout
    assert "NO LONGER FAILS test_prop.py::test_p[cpu-w1] (stored failure 1 of 1)" in result.stdout
    assert _shared_key_db(suite)["entries"] == db["entries"]  # replay only reads


def test_fuzzdist_run_adopts_the_shared_key_like_pytest(shared_key_suite):
    from helpers.cli_helpers import read_report, run_cli

    suite, db = shared_key_suite
    result = run_cli(
        [
            "run",
            "test_prop.py",
            "--max-examples",
            "20",
            "--database",
            "db",
            "--progress",
            "plain",
            "--report",
            "r.json",
            "--junit",
            "",
        ],
        cwd=suite.path,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    for variant in ("w1", "w2"):
        assert (
            f"test_prop.py::test_p[cpu-{variant}]: its own database key held nothing; replaying the 1 "
            f"example(s) stored under the key its pool variants shared before each had its own "
            f"({db['keys']['shared']})"
        ) in result.stdout, result.stdout
    w1, w2 = read_report(suite.path / "r.json")["properties"]
    assert w2["nodeid"].endswith("[cpu-w2]") and w2["database_key"] == db["keys"]["w2"]
    assert w2["stored_failures_at_start"] == 1 and w2["failures"][0]["from_database"]
    assert w1["status"] == "passed"
    after = _shared_key_db(suite)["entries"]
    assert after["shared"] == db["entries"]["shared"] and db["entries"]["shared"][0] in after["w2"]


# -- pytest-timeout's backstop follows the examples a profile runs --------------------------------

BACKSTOP_CONFTEST = '''
def pytest_timeout_set_timer(item, settings):
    """Records the timer pytest-timeout is about to set (after fuzzdist's scaling), then lets it."""
    with open("timers.txt", "a") as f:
        f.write(f"{item.name} {settings.timeout:g}\\n")
'''

BACKSTOP_TESTS = """
import time
import pytest
from hypothesis import given, strategies as st

@given(st.none())  # one example: st.none() has nothing else to draw
def test_slow(x):
    time.sleep(4)  # twice the ini's timeout

@pytest.mark.timeout(3)
@given(st.none())
def test_marked(x):
    pass

def test_plain():
    pass
"""


def _timers(suite, *args):
    (suite.path / "timers.txt").unlink(missing_ok=True)
    result = suite.runpytest("-p", "no:cacheprovider", *args)
    timers = dict(line.split() for line in (suite.path / "timers.txt").read_text().splitlines())
    return result, timers


def test_timeout_backstop_grows_with_the_campaign_profile_and_is_unchanged_by_default(suite, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    suite.makeini("[pytest]\ntimeout = 2\n")
    suite.makeconftest(BACKSTOP_CONFTEST)
    suite.makepyfile(test_backstop=BACKSTOP_TESTS)
    # campaign: 100,000 examples per test, 1000 x the ini's timeout; test_slow outlives the ini's 2 s.
    result, timers = _timers(suite, "--hypothesis-profile=campaign")
    assert timers == {"test_slow": "2000", "test_marked": "3", "test_plain": "2"}
    result.assert_outcomes(passed=3)
    # The default profile (dev, 100 examples): the ini's timeout, and test_slow is cut off at 2 s.
    result, timers = _timers(suite)
    assert timers == {"test_slow": "2", "test_marked": "3", "test_plain": "2"}
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*Timeout (>2.0s) from pytest-timeout*", "FAILED*test_slow*"])


# -- --fuzzdist-world-size replaces (N[,N...]) or adds to (+N[,N...]) each property's world sizes ---

WORLD_SIZE_TESTS = """
import pytest

@pytest.mark.fuzzdist(world_size=[1, 3])
def test_pinned(rank_pool):
    pass

def test_unpinned(rank_pool):
    pass
"""


@pytest.mark.parametrize(
    "option, expected",
    [
        ([], ["test_pinned[cpu-w1]", "test_pinned[cpu-w3]", "test_unpinned[cpu-w2]"]),
        (["--fuzzdist-world-size=4"], ["test_pinned[cpu-w4]", "test_unpinned[cpu-w4]"]),
        (
            ["--fuzzdist-world-size=2,4"],
            ["test_pinned[cpu-w2]", "test_pinned[cpu-w4]", "test_unpinned[cpu-w2]", "test_unpinned[cpu-w4]"],
        ),
        (
            ["--fuzzdist-world-size=+1,4"],
            [
                "test_pinned[cpu-w1]",
                "test_pinned[cpu-w3]",
                "test_pinned[cpu-w4]",
                "test_unpinned[cpu-w2]",
                "test_unpinned[cpu-w1]",
                "test_unpinned[cpu-w4]",
            ],
        ),
    ],
)
def test_world_size_option_replaces_or_adds_to_the_markers_sizes(suite, option, expected):
    suite.makepyfile(test_ws=WORLD_SIZE_TESTS)
    result = suite.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *option)
    # (pytest groups the items by pool, so compare them sorted)
    assert sorted(line.split("::")[1] for line in result.stdout.lines if "::" in line) == sorted(expected)


@pytest.mark.parametrize(
    "value, message",
    [
        ("0", "'0': a world size must be at least 1"),
        (
            "two",
            "'two' is not N[,N...] or +N[,N...]: give whole numbers of ranks, e.g. 4 (every property at 4 ranks) "
            "or +4,8 (each property's own world sizes, and 4 and 8)",
        ),
        ("+", "'+' is not N[,N...] or +N[,N...]"),
        ("2,,4", "'2,,4' is not N[,N...] or +N[,N...]"),
        ("-1", "'-1' is not N[,N...] or +N[,N...]"),
    ],
)
def test_bad_world_size_option_is_a_usage_error(suite, value, message):
    suite.makepyfile(test_ws=WORLD_SIZE_TESTS)
    result = suite.runpytest("--collect-only", "-p", "no:cacheprovider", f"--fuzzdist-world-size={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"argument --fuzzdist-world-size: {message}" in result.stderr.str()


def test_bad_marker_world_size_is_a_usage_error(suite):
    suite.makepyfile(
        test_ws="""
import pytest
@pytest.mark.fuzzdist(world_size=[2, 0])
def test_p(rank_pool):
    pass
"""
    )
    result = suite.runpytest("--collect-only", "-p", "no:cacheprovider")
    assert result.ret != 0
    assert (
        "test_ws.py::test_p: the fuzzdist marker's world_size must be a whole number of ranks (at least 1) "
        "or a list of them, got [2, 0]"
    ) in result.stdout.str()
