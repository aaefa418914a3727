"""``fuzzdist run`` without ``--jobs`` uses the machine's cores, as many as its memory holds; ``--jobs 1``
keeps one worker."""

from __future__ import annotations

import pytest
from helpers.cli_helpers import cli_env, read_report, write

from fuzzdist.campaign import default_jobs as dj
from fuzzdist.campaign.jobs import usable_cores
from fuzzdist.cli import build_parser
from fuzzdist.cli.run import _jobs_gpus
from fuzzdist.errors import UsageError

GIB = 1024**3


def test_the_rule_is_one_worker_per_core_as_many_as_the_memory_holds():
    assert dj.jobs_rule(cores=8, memory=64 * GIB) == 8
    assert dj.jobs_rule(cores=8, memory=6 * GIB + 1) == 3  # 2 GiB a worker
    assert dj.jobs_rule(cores=2, memory=None) == 2  # memory unknown: the cores
    assert dj.jobs_rule(cores=16, memory=GIB) == 1  # never none


def test_one_worker_under_torchrun_and_on_gpus():
    assert dj.default_jobs("cuda", False, 8, 64 * GIB, env={}) == 1
    assert dj.default_jobs(None, True, 8, 64 * GIB, env={}) == 1
    assert dj.default_jobs("cpu", False, 8, 64 * GIB, env={}) == 8


def test_the_environment_variable_fixes_the_default_and_bad_values_are_refused():
    assert dj.default_jobs(None, False, 8, 64 * GIB, env={"FUZZDIST_JOBS": "3"}) == 3
    for bad in ("0", "two", "-1"):
        with pytest.raises(UsageError, match=r"FUZZDIST_JOBS=.*whole number, at least 1"):
            dj.default_jobs(None, False, 8, 64 * GIB, env={"FUZZDIST_JOBS": bad})


def _resolved_jobs(argv: list[str]) -> int:
    args = build_parser().parse_args(["run", *argv])
    _jobs_gpus(args)
    return args.jobs


def test_run_without_jobs_takes_the_rule_and_jobs_1_keeps_one_worker(monkeypatch):
    monkeypatch.delenv("FUZZDIST_JOBS", raising=False)
    monkeypatch.setattr("fuzzdist.campaign.jobs.usable_cores", lambda: 4)
    monkeypatch.setattr(dj, "available_memory", lambda: 5 * GIB)
    assert _resolved_jobs([]) == 2  # 4 cores, memory for 2
    assert _resolved_jobs(["--jobs", "1"]) == 1
    assert _resolved_jobs(["--worker", "0/2"]) == 1  # a --jobs worker never starts workers of its own


TWO = """
from hypothesis import given, strategies as st

def echo(ctx, k):
    return k

@given(k=st.integers(0, 9))
def test_one(rank_pool, k):
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size

@given(k=st.integers(0, 9))
def test_two(rank_pool, k):
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size
"""


def test_fuzzdist_run_uses_the_cores_by_default(tmp_path):
    import subprocess
    import sys

    expected = dj.jobs_rule(usable_cores(), dj.available_memory())
    if expected < 2:
        pytest.skip("this machine's default is one worker (one core, or memory for one)")
    write(tmp_path, "test_two.py", TWO)
    env = cli_env()
    env.pop("FUZZDIST_JOBS", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            "test_two.py",
            "--max-examples",
            "3",
            "--database",
            "db",
            "--junit",
            "",
            "--progress",
            "plain",
        ],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(tmp_path / "fuzzdist-report.json")
    assert len(report["workers"]) == expected
    assert sum(p["examples"] for p in report["properties"]) >= 2 * 3


def test_a_bad_environment_default_is_one_line_and_exit_2_before_anything_runs(tmp_path, monkeypatch, capsys):
    from fuzzdist.cli import main

    write(tmp_path, "test_two.py", TWO)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FUZZDIST_JOBS", "all")
    code = main(["run", "test_two.py", "--duration", "5s"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "$FUZZDIST_JOBS='all' is not a number of workers" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "fuzzdist-report.json").exists()
