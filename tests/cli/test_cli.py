"""The ``fuzzdist`` command line: bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.cli_helpers import CLI_TIMEOUT, cli_env, free_port, write

from fuzzdist.cli import main, parse_duration

PROPERTY = """
from hypothesis import given, strategies as st

def test_not_a_property():
    pass

@given(n=st.integers())
def test_prop(n):
    pass
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "properties").mkdir()
    write(tmp_path / "properties", "test_props.py", PROPERTY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_line_error(capsys, argv, *expected):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err  # one line
    for text in expected:
        assert text in err, err
    return err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["run", "--duration", "5x"], ["bad --duration '5x'", "e.g. 30s, 10m, 2h"]),
        (["run", "--duration", "0s"], ["bad --duration '0s'", "longer than 0s"]),
        (["run", "--max-examples", "0"], ["'0' must be at least 1"]),
        (["run", "--device", "tpu"], ["invalid choice: 'tpu'"]),
        (["run", "no/such/file.py"], ["no such file or directory: no/such/file.py"]),
        (["run", "missing.py::test_x"], ["no such file: missing.py"]),
        (["run", "--database", "ftp://host/db"], ["unknown URL scheme", "redis://"]),
        (["replay", "--database", "nowhere"], ["no example database at nowhere", "fuzzdist run"]),
        (["frobnicate"], ["invalid choice: 'frobnicate'"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(project, capsys, argv, expected):
    _one_line_error(capsys, argv, *expected)


def test_database_directory_that_cant_be_written(project, capsys):
    (project / "a_file").write_text("not a directory")
    _one_line_error(
        capsys,
        ["run", "--database", "a_file/db"],
        "can't write the example database directory a_file/db",
        "writable directory",
    )


def test_unreachable_redis_url(project, capsys):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    err = _one_line_error(capsys, ["run", "--database", url])
    pytest.importorskip("redis")
    assert f"can't reach the Redis example database at {url}" in err and "start redis-server" in err


def test_report_that_cant_be_written(project, capsys):
    _one_line_error(capsys, ["run", "--report", "no_dir/r.json"], "can't write no_dir/r.json", "--report")
    _one_line_error(capsys, ["run", "--junit", "no_dir/j.xml"], "can't write no_dir/j.xml", "--junit")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")
def test_cuda_without_gpu(project, capsys):
    _one_line_error(capsys, ["run", "--device", "cuda"], "--device cuda needs CUDA", "use --device cpu")


def test_no_properties_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _one_line_error(capsys, ["run"], "no properties/ directory here")


def test_durations():
    assert parse_duration("30s") == 30 and parse_duration("10m") == 600 and parse_duration("2h") == 7200
    assert parse_duration("1h30m") == 5400 and parse_duration("1.5h") == 5400 and parse_duration("45") == 45


def test_unknown_property_names_through_the_console_script(project):
    """Resolved after collection: one line listing the known properties; also via `fuzzdist` itself."""
    script = Path(sys.executable).parent / "fuzzdist"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "fuzzdist"]
    result = subprocess.run(
        [*command, "run", "no_such_property", "properties/test_props.py::test_nope"],
        cwd=project,
        env=cli_env(),
        text=True,
        capture_output=True,
        timeout=CLI_TIMEOUT,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert (
        "no property 'test_nope' in properties/test_props.py; properties there: test_not_a_property, test_prop"
        in result.stderr
    )
    result = subprocess.run(
        [sys.executable, "-m", "fuzzdist", "replay", "no_such_property", "--database", "."],
        cwd=project,
        env=cli_env(),
        text=True,
        capture_output=True,
        timeout=CLI_TIMEOUT,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == (
        "fuzzdist replay: error: unknown property 'no_such_property': no test of that name in "
        "properties/; give a file, a file::test id, or one of: test_prop\n"
    )
    assert not list(project.glob("*.xml")) and not list(project.glob("*.json"))  # no report of a bad run
