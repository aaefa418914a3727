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
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.mark.parametrize(
    ("cell", "run"),
    [
        ("BUG", (1, "BUG: x\n", "")),
        ("FIXED", (0, "FIXED: x\n", "")),
        ("no verdict", (3, "NO VERDICT: the ranks did not answer\n", "")),
        ("no verdict (killed at the timeout)", (None, "", "")),
    ],
)
def test_each_outcome_has_its_cell(cell: str, run: tuple) -> None:
    assert _module().verdict(*run) == cell


def test_anything_else_is_an_error_with_its_last_line() -> None:
    cell = _module().verdict(1, "", "Traceback ...\nAttributeError: module 'torch.distributed' has no attribute 'x'\n")
    assert cell.startswith("error (exit 1: AttributeError: module 'torch.distributed'")
    assert _module().verdict(0, "BUG: a BUG line with exit 0\n", "").startswith("error (exit 0")


def test_the_table_is_finding_by_version() -> None:
    table = _module().table(
        ["a", "b"],
        ["2.6.0", "2.13.0"],
        {("a", 0): "BUG", ("a", 1): "FIXED", ("b", 0): "error (exit 2: x)", ("b", 1): "BUG"},
    )
    assert table.splitlines() == [
        "| finding | torch 2.6.0 | torch 2.13.0 |",
        "|---|---|---|",
        "| `a` | BUG | FIXED |",
        "| `b` | error (exit 2: x) | BUG |",
    ]


def test_a_run_on_this_python_prints_the_table() -> None:
    done = _run(sys.executable, "--only", FAST, "--jobs", "1")
    assert done.returncode == 0, done.stderr
    import torch

    assert done.stdout.splitlines() == [f"| finding | torch {torch.__version__} |", "|---|---|", f"| `{FAST}` | BUG |"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["/nonexistent/venv"], "/nonexistent/venv: no Python there"),
        ([sys.executable, "--only", "no-such-finding"], "no reproducer named no-such-finding"),
        ([sys.executable, "--timeout", "0"], "--timeout 0"),
        ([sys.executable, "--jobs", "0"], "--jobs 0"),
        (["/bin/true"], "/bin/true: its Python can't import torch"),
        ([], "the following arguments are required"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2_before_anything_runs(args: list[str], said: str) -> None:
    done = _run(*args, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr


PINNED = "2.13.0+cpu"  # a column of the catalogue's matrix, whichever torch runs the tests


def _catalogue_copy(module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The catalogue module run_matrix loads, reading and writing a copy of the catalogue; the Python
    named is taken to have torch PINNED."""
    monkeypatch.setattr(module, "torch_version", lambda python, venv: PINNED)
    catalogue = module.catalogue_module()
    copy = tmp_path / "catalogue.toml"
    copy.write_text(catalogue.PATH.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(catalogue, "PATH", copy)
    monkeypatch.setattr(module, "catalogue_module", lambda: catalogue)
    return catalogue


@pytest.mark.parametrize(("printed", "code"), [("BUG", 0), ("FIXED", 1)])
def test_check_compares_each_cell_with_the_catalogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], printed: str, code: int
) -> None:
    module = _module()
    _catalogue_copy(module, tmp_path, monkeypatch)
    monkeypatch.setattr(module, "run_one", lambda python, script, timeout: printed)
    assert module.main([sys.executable, "--only", FAST, "--jobs", "1", "--check"]) == code
    differs = [line for line in capsys.readouterr().err.splitlines() if line.startswith("differs: ")]
    assert differs == (
        [] if code == 0 else [f"differs: {FAST} on torch {PINNED}: printed FIXED, the catalogue says BUG"]
    )


def test_a_version_the_catalogue_lacks_differs_everywhere() -> None:
    module = _module()
    catalogue = module.catalogue_module().load()
    lines = module.differences(catalogue, [FAST], ["9.9.9"], {(FAST, 0): "BUG"})
    assert lines == [
        f"torch 9.9.9 is not a column of the catalogue's matrix (it has {', '.join(catalogue.versions)})"
        ": --update adds it"
    ]


def test_update_writes_the_cells_into_the_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module()
    catalogue = _catalogue_copy(module, tmp_path, monkeypatch)
    before = catalogue.parse(catalogue.PATH.read_text(encoding="utf-8"))
    monkeypatch.setattr(module, "run_one", lambda python, script, timeout: "FIXED")
    assert module.main([sys.executable, "--only", FAST, "--jobs", "1", "--update"]) == 0
    after = catalogue.parse(catalogue.PATH.read_text(encoding="utf-8"))
    assert after.findings[FAST].matrix[PINNED] == "FIXED"
    assert before.findings[FAST].matrix[PINNED] == "BUG"
    assert {i: f.matrix for i, f in after.findings.items() if i != FAST} == {
        i: f.matrix for i, f in before.findings.items() if i != FAST
    }
