"""Numbers with limits: world sizes the machine can't hold, timeouts no pool can meet or that never end,
negative durations: each one line and exit 2, with the reason."""

from __future__ import annotations

import pytest
from helpers.cli_helpers import write

from fuzzdist.cli import main
from fuzzdist.pool.capabilities import pool_args

PROPERTY = """
from hypothesis import given, strategies as st

@given(n=st.integers())
def test_prop(n):
    pass
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "properties").mkdir()
    write(tmp_path / "properties", "test_props.py", PROPERTY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    return tmp_path


def _one_line_error(capsys, argv, *expected):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.endswith("\n") and err.count("\n") == 1, err
    for text in expected:
        assert text in err, err
    return err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["run", "--duration", "-5s"], ["bad --duration '-5s': it must be longer than 0s"]),
        (["run", "--duration", "-1h30m"], ["bad --duration '-1h30m': it must be longer than 0s"]),
        (["check-pg", "m:f", "--duration", "-5s"], ["bad --duration '-5s'"]),
        (["run", "--duration", "99999999d"], ["bad --duration '99999999d': it is more than a year"]),
        (["run", "--timeout", "inf"], ["'inf' is not a finite number of seconds"]),
        (["run", "--timeout", "nan"], ["'nan' must be more than 0 seconds"]),
        (["run", "--timeout", "0.001"], ["'0.001' is below 1 second", "false hang"]),
        (["run", "--timeout", "1e9"], ["'1e9' is more than a week"]),
        (["replay", "--timeout", "inf"], ["'inf' is not a finite number of seconds"]),
        (["check-pg", "m:f", "--timeout", "0.01"], ["'0.01' is below 1 second"]),
        (["run", "--progress-interval", "inf"], ["'inf' is not a finite number of seconds"]),
        (["run", "--world-size", "1000"], ["argument --world-size: 1000: this machine can hold about", "pass at most"]),
        (["check-pg", "m:f", "-w", "2", "-w", "1000"], ["1000: this machine can hold about"]),
        (
            ["check-pg", "m:f", "--max-bytes", str(2**62)],
            [
                f"--max-bytes {2**62}: at world size 3 the ranks would hold about 18 tensors of that size",
                "pass at most",
            ],
        ),
        (["check-pg", "m:f", "-w", "8", "--max-bytes", str(2**36)], ["at world size 8", "about 128 tensors"]),
    ],
)
def test_numbers_out_of_bounds_are_one_line_and_exit_2(project, capsys, argv, expected):
    _one_line_error(capsys, argv, *expected)


def test_the_world_size_bound_follows_the_machine_s_memory(monkeypatch):
    monkeypatch.setattr(pool_args, "_machine_memory", lambda: 10 * pool_args.RANK_MEMORY_BYTES)
    assert pool_args.too_many_ranks(9) is None
    assert "about 9 rank processes" in pool_args.too_many_ranks(10)
    monkeypatch.setattr(pool_args, "_machine_memory", lambda: None)  # unknown: no bound
    assert pool_args.too_many_ranks(10_000) is None


def test_under_torchrun_the_world_size_is_torchruns_and_not_bounded_here(monkeypatch):
    from fuzzdist.cli._common import world_size

    monkeypatch.setattr(pool_args, "_machine_memory", lambda: pool_args.RANK_MEMORY_BYTES)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert world_size("64") == 64


def test_a_rank_pool_the_machine_can_t_hold_is_refused_before_a_rank_starts(monkeypatch):
    from fuzzdist import RankPool
    from fuzzdist.errors import InvalidArgument

    monkeypatch.setattr(pool_args, "_machine_memory", lambda: 4 * pool_args.RANK_MEMORY_BYTES)
    with pytest.raises(InvalidArgument, match="world_size=8: this machine can hold about 3 rank processes"):
        RankPool(world_size=8)


@pytest.mark.parametrize(
    "variable, value, expected",
    [
        ("FUZZDIST_START_METHOD", "fork", "FUZZDIST_START_METHOD='fork': expected spawn or forkserver"),
        ("FUZZDIST_SPARES", "2", "FUZZDIST_SPARES='2': expected never, always or auto"),
    ],
)
@pytest.mark.parametrize("command", [["run", "--max-examples", "1"], ["replay"]])
def test_a_bad_pool_variable_is_one_line_and_exit_2(project, capsys, monkeypatch, variable, value, expected, command):
    monkeypatch.setenv(variable, value)
    _one_line_error(capsys, command, expected)


def test_the_max_bytes_bound_follows_the_machine_s_memory_and_the_largest_world_size(project, capsys, monkeypatch):
    import os

    pages = {"SC_PHYS_PAGES": 2**20, "SC_PAGE_SIZE": 4096}  # 4 GiB
    monkeypatch.setattr(os, "sysconf", lambda name: pages[name])
    err = _one_line_error(capsys, ["check-pg", "m:f", "-w", "2", "--max-bytes", str(2**29 + 1)])
    assert f"pass at most {2**29}" in err, err  # 4 GiB / (2 * 2 * 2)


def test_a_bad_fuzzdist_timeout_is_a_pytest_usage_error(pytester):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    for value, message in (
        ("inf", "'inf' is not a finite number of seconds"),
        ("0", "'0' must be more than 0"),
        ("0.1", "'0.1' is below 1 second"),
        ("1e9", "'1e9' is more than a week"),
        ("soon", "'soon' is not a number of seconds"),
    ):
        result = pytester.runpytest("-p", "no:cacheprovider", f"--fuzzdist-timeout={value}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR, value
        assert f"argument --fuzzdist-timeout: {message}" in result.stderr.str()
