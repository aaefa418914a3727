"""docs/findings/run_matrix.py: the finding x torch-version table, from the environments the user names."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "findings" / "run_matrix.py"
FAST = "gloo-scatter-ignores-strides"  # one rank, no spawned processes: seconds


def _module():
    spec = importlib.util.spec_from_file_location("run_matrix", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


@pytest.mark.parametrize(("cell", "run"), [
    ("BUG", (1, "BUG: x\n", "")),
    ("FIXED", (0, "FIXED: x\n", "")),
    ("no verdict", (3, "NO VERDICT: the ranks did not answer\n", "")),
    ("no verdict (killed at the timeout)", (None, "", "")),
])
def test_each_outcome_has_its_cell(cell: str, run: tuple) -> None:
    assert _module().verdict(*run) == cell


def test_anything_else_is_an_error_with_its_last_line() -> None:
    cell = _module().verdict(1, "", "Traceback ...\nAttributeError: module 'torch.distributed' has no attribute 'x'\n")
    assert cell.startswith("error (exit 1: AttributeError: module 'torch.distributed'")
    assert _module().verdict(0, "BUG: a BUG line with exit 0\n", "").startswith("error (exit 0")


def test_the_table_is_finding_by_version() -> None:
    table = _module().table(["a", "b"], ["2.6.0", "2.13.0"], {("a", 0): "BUG", ("a", 1): "FIXED",
                                                              ("b", 0): "error (exit 2: x)", ("b", 1): "BUG"})
    assert table.splitlines() == ["| finding | torch 2.6.0 | torch 2.13.0 |", "|---|---|---|",
                                  "| `a` | BUG | FIXED |", "| `b` | error (exit 2: x) | BUG |"]


def test_a_run_on_this_python_prints_the_table() -> None:
    done = _run(sys.executable, "--only", FAST, "--jobs", "1")
    assert done.returncode == 0, done.stderr
    import torch

    assert done.stdout.splitlines() == [f"| finding | torch {torch.__version__} |", "|---|---|",
                                        f"| `{FAST}` | BUG |"]


@pytest.mark.parametrize(("args", "said"), [
    (["/nonexistent/venv"], "/nonexistent/venv: no Python there"),
    ([sys.executable, "--only", "no-such-finding"], "no reproducer named no-such-finding"),
    ([sys.executable, "--timeout", "0"], "--timeout 0"),
    ([sys.executable, "--jobs", "0"], "--jobs 0"),
    (["/bin/true"], "/bin/true: its Python can't import torch"),
    ([], "the following arguments are required"),
])
def test_bad_input_gets_one_line_and_exit_2_before_anything_runs(args: list[str], said: str) -> None:
    done = _run(*args, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
