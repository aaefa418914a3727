"""``fuzzdist replay``: re-executes stored failures and says what became of each.

One campaign fills a database with the failures of five properties; then
one property's bug is fixed, one test's source is changed and one test is
removed, and a single replay must report each case as such.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
from helpers.cli_helpers import CLI_TIMEOUT, cli_env, read_report, run_cli, write

PROPERTIES = """
import pytest
from hypothesis import given, strategies as st

def check(ctx, n):
    if n >= 1000 and ctx.rank == 1:
        raise ValueError(f"planted bug: n={n}")

def check_to_fix(ctx, n):
    if n >= 500 and ctx.rank == 1:
        raise KeyError(f"bug about to be fixed: n={n}")

@pytest.mark.fuzzdist(world_size=2)
@given(n=st.integers(0, 10**6))
def test_pinnable(rank_pool, n):
    rank_pool.run(check, n)

@pytest.mark.fuzzdist(world_size=2)
@given(data=st.data(), n=st.integers(0, 10**6))
def test_with_data(rank_pool, data, n):
    shift = data.draw(st.integers(0, 5), label="shift")
    rank_pool.run(check, n + shift)

@pytest.mark.fuzzdist(world_size=2)
@given(n=st.integers(0, 10**6))
def test_fixed(rank_pool, n):
    rank_pool.run(check_to_fix, n)

@pytest.mark.fuzzdist(world_size=2)
@given(n=st.integers(0, 10**6))
def test_changed(rank_pool, n):
    rank_pool.run(check, n)

@pytest.mark.fuzzdist(world_size=2)
@given(n=st.integers(0, 10**6))
def test_removed(rank_pool, n):
    rank_pool.run(check, n)
"""


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """(project dir, campaign report, replay result) after fixing, changing and removing tests."""
    project = tmp_path_factory.mktemp("replay")
    path = write(project, "test_props.py", PROPERTIES)
    campaign = run_cli(
        ["run", "test_props.py", "--max-examples", "60", "--database", "db", "--report", "r.json", "--junit", ""],
        cwd=project,
    )
    assert campaign.returncode == 1, campaign.stdout + campaign.stderr
    report = read_report(project / "r.json")
    assert all(len(p["failures"]) == 1 and p["failures"][0]["shrunk"] for p in report["properties"]), report
    source = path.read_text()
    source = source.replace('        raise KeyError(f"bug about to be fixed: n={n}")', "        pass  # fixed")
    source = source.replace("def test_changed(rank_pool, n):\n", "def test_changed(rank_pool, n):\n    n = int(n)\n")
    removed = "@pytest.mark.fuzzdist(world_size=2)\n@given(n=st.integers(0, 10**6))\ndef test_removed"
    source = source[: source.index(removed)]
    path.write_text(source)
    result = run_cli(["replay", "--database", "db", "--export", "test_props.py"], cwd=project)
    return project, report, result


def _block(stdout: str, header: str) -> str:
    """The lines printed for one stored failure, from its header line to the next blank line."""
    start = stdout.index(header)
    end = re.compile(r"\n(?=\S)").search(stdout, start + len(header))  # the next unindented line
    return stdout[start : end.start() if end else None]


def test_replay_prints_minimal_example_rank_tracebacks_and_reproduce_command(replayed):
    project, _, result = replayed
    assert result.returncode == 1, result.stdout + result.stderr  # stored failures still fail
    block = _block(result.stdout, "FAILS           test_props.py::test_pinnable[cpu-w2]")
    assert re.search(r"minimal example:\n\s+test_pinnable\(\n.*\n\s+n=1000,\n\s+\)", block), block
    assert "--- rank 1 traceback ---" in block and "ValueError: planted bug: n=1000" in block
    assert 'test_props.py", line 7, in check' in block  # the remote raising site
    command = (
        "pytest -p fuzzdist.campaign --fuzzdist-database=db 'test_props.py::test_pinnable[cpu-w2]' "
        "--hypothesis-profile=replay"
    )
    assert f"reproduce: {command}" in block
    # The command reproduces it under plain pytest.
    plain = subprocess.run(
        [sys.executable, "-m", *shlex.split(command)],
        cwd=project,
        env=cli_env(),
        text=True,
        capture_output=True,
        timeout=CLI_TIMEOUT,
    )
    assert plain.returncode == 1 and "ValueError: planted bug: n=1000" in plain.stdout, plain.stdout
    assert "1 failed" in plain.stdout


def test_export_prints_example_lines_and_says_what_cant_be_pinned(replayed):
    _, _, result = replayed
    block = _block(result.stdout, "FAILS           test_props.py::test_pinnable[cpu-w2]")
    assert "pin it as a regression test:\n      @example(n=1000)" in block, block
    block = _block(result.stdout, "FAILS           test_props.py::test_with_data[cpu-w2]")
    assert "Draw 1 (shift): " in block
    assert "can't be pinned with @example: `data` is drawn with st.data()" in block, block
    assert "@reproduce_failure(" in block


def test_fixed_bug_is_reported_as_no_longer_failing(replayed):
    _, _, result = replayed
    assert "NO LONGER FAILS test_props.py::test_fixed[cpu-w2] (stored failure 1 of 1): it passes now" in result.stdout
    assert "bug about to be fixed" not in result.stdout


def test_changed_and_removed_tests_are_reported(replayed):
    _, report, result = replayed
    assert (
        "OLDER VERSION   test_props.py::test_changed[cpu-w2]: 1 stored failure(s) under an older version of the test"
    ) in result.stdout, result.stdout
    # ... replayed against the current version, where the bug is still there:
    assert (
        "FAILS           test_props.py::test_changed[cpu-w2] (stored under an older version of the test)"
        in result.stdout
    )
    assert (
        "GONE            test_props.py::test_removed[cpu-w2]: 1 stored failure(s) of a test that no longer "
        "exists" in result.stdout
    )
    assert result.stdout.rstrip().splitlines()[-1] == (
        "replay: 3 still fail, 1 no longer fail, 1 properties with failures stored under an older version of the "
        "test, 1 stored for tests that no longer exist"
    )
