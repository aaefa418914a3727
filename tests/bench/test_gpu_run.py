"""bench/gpu_run.sh, the GPU suite's one device call: its refusals, its step bookkeeping, and a dry step.

The whole dry run (every step's CPU-side part) takes minutes on 2 cores; docs/gpu-run.md says how to run
it. Here one real step runs dry, and the others are checked as the script names them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_run.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash")


def _run(env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("FUZZDIST_GPU_")}
    full.pop("OUT", None)
    full.update(env)
    return subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=timeout)


def test_the_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_without_out_it_says_what_to_set_and_exits_2():
    result = _run({})
    assert result.returncode == 2
    assert "set OUT" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_budget_that_is_not_a_number_exits_2_before_any_step(tmp_path):
    result = _run({"OUT": str(tmp_path), "FUZZDIST_GPU_BUDGET_S": "5m"})
    assert result.returncode == 2
    assert "FUZZDIST_GPU_BUDGET_S" in result.stderr
    assert not (tmp_path / "steps.tsv").exists()


def test_a_dry_step_runs_and_is_recorded_the_others_are_left_out(tmp_path):
    result = _run(
        {
            "OUT": str(tmp_path),
            "FUZZDIST_GPU_DRY_RUN": "1",
            "FUZZDIST_GPU_STEPS": "environment",
            "PYTHON": sys.executable,
        }
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in (tmp_path / "steps.tsv").read_text().splitlines()]
    assert rows[0] == ["step", "exit", "seconds", "limit"]
    assert [row[0] for row in rows[1:]] == ["environment"]
    assert rows[1][1] == "0"
    log = (tmp_path / "environment.log").read_text()
    assert "torch" in log and "hypothesis" in log


def test_a_step_with_too_little_budget_left_is_skipped_not_started(tmp_path):
    result = _run(
        {
            "OUT": str(tmp_path),
            "FUZZDIST_GPU_DRY_RUN": "1",
            "FUZZDIST_GPU_BUDGET_S": "3",
            "FUZZDIST_GPU_STEPS": "environment,cpu_side",
            "PYTHON": sys.executable,
        }
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in (tmp_path / "steps.tsv").read_text().splitlines()[1:]]
    assert [(row[0], row[1]) for row in rows] == [("environment", "skipped"), ("cpu_side", "skipped")]
    assert not (tmp_path / "cpu_side.log").exists()


def test_every_step_of_the_documented_table_is_in_the_script():
    script = SCRIPT.read_text()
    page = (ROOT / "docs" / "gpu-run.md").read_text()
    for name in ("environment", "install", "cpu_side", "properties_ci", "planted", "gpu_bench", "jobs"):
        assert f"step {name} " in script, name
        assert f"`{name}`" in page, name
    assert 'step "pool_overhead_w$w"' in script and "`pool_overhead_w2`" in page
