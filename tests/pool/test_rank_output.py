"""What the ranks write is kept per example: shown with a failure, summarised once otherwise, live on request."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import rank_fns
from helpers.cli_helpers import cli_env, read_report, run_cli, write

from fuzzdist import RankCrash, RankError, RankPool
from fuzzdist.errors import InvalidArgument
from fuzzdist.pool.rank import rank_output

NOISY = """
import os
import warnings
from hypothesis import given, settings, strategies as st

def noisy(ctx, n):
    warnings.warn(f"planted warning from rank {ctx.rank}")
    os.write(2, f"planted C++-style line from rank {ctx.rank}\\n".encode())
    if n == 7 and ctx.rank == 1:
        raise ValueError("planted failure")

@settings(max_examples=30, database=None)
@given(n=st.integers(0, 6))
def test_noisy(rank_pool, n):
    rank_pool.run(noisy, n)

@settings(max_examples=5, database=None)
@given(n=st.just(7))
def test_fails(rank_pool, n):
    rank_pool.run(noisy, n)
"""


def _pytest(tmp_path, *args):
    write(tmp_path, "test_noisy.py", NOISY)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "test_noisy.py", "-p", "no:cacheprovider", "-s", *args],
        cwd=tmp_path,
        env=cli_env(),
        text=True,
        capture_output=True,
        timeout=300,
    )


def test_passing_examples_are_quiet_and_summarised_once_failures_show_their_output(tmp_path):
    result = _pytest(tmp_path)
    out = result.stdout + result.stderr
    summary = out[out.index("fuzzdist: what the ranks wrote in passing examples") :]
    before = out[: out.index("fuzzdist: what the ranks wrote in passing examples")]
    # -s shows everything the driver writes: nothing from the ranks' passing examples comes through ...
    assert "planted C++-style line" not in before.split("test_fails")[0].split("= FAILURES =")[0]
    # ... it is counted at the end, per property, by rank ...
    assert "test_noisy.py::test_noisy[cpu-w2]" in summary
    assert "7 examples, rank 1: UserWarning: planted warning from rank 1" in summary
    assert "7 examples, rank 0: output: planted C++-style line from rank 0" in summary
    # ... and the failing example shows what each rank wrote with the failure.
    assert "--- rank 1 wrote during the example ---" in out
    assert "UserWarning: planted warning from rank 1" in before


def test_live_mode_lets_the_ranks_print(tmp_path):
    result = _pytest(tmp_path, "-k", "not test_fails", "--fuzzdist-rank-output=live")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "planted C++-style line from rank 1" in out
    assert "what the ranks wrote in passing examples" not in out


def test_a_rank_error_carries_what_the_ranks_wrote():
    with RankPool(2, timeout=10) as pool, pytest.raises(RankError) as info:
        pool.run(rank_fns.warn_then_raise_on, 1)
    err = info.value
    assert set(err.outputs) == {0, 1}
    assert err.outputs[1].warnings[0][:2] == ("UserWarning", "planted warning on rank 1")
    assert "printed by rank 1" in err.outputs[1].text
    assert "--- rank 0 wrote during the example ---" in str(err)


def test_a_crash_shows_the_ranks_last_output():
    with RankPool(2, timeout=10) as pool, pytest.raises(RankCrash) as info:
        pool.run(rank_fns.all_reduce_sizes_differ)
    # gloo aborts the process on a size mismatch and says why only on stderr: fuzzdist shows it under the
    # dead rank's heading, before its stack.
    text = str(info.value)
    outputs = [
        text.split(f"--- rank {r}'s last output ---\n", 1)[-1].split(f"--- rank {r} stack", 1)[0]
        for r in info.value.ranks
        if f"--- rank {r}'s last output ---" in text
    ]
    # gloo's words, as each torch's gloo has them: the enforce that failed, which torch 2.13's gloo follows
    # with "Is there a distributed collective mismatch in your code?" and torch 2.6's with nothing
    assert any(
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'" in out
        and "op.preamble.length <= op.nbytes" in out
        for out in outputs
    ), text


def test_a_bad_mode_is_refused_with_the_choices():
    with pytest.raises(InvalidArgument, match="'capture', 'live'"):
        RankPool(2, rank_output="quiet")


def test_the_campaign_report_lists_what_the_ranks_wrote(tmp_path):
    write(tmp_path, "test_noisy.py", NOISY)
    result = run_cli(["run", "test_noisy.py::test_noisy", "--max-examples", "10", "--report", "r.json"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    [prop] = read_report(tmp_path / "r.json")["properties"]
    whats = {entry["what"] for entry in prop["rank_output"]}
    assert any(w.startswith("UserWarning: planted warning from rank 0") for w in whats), whats
    assert all(entry["examples"] >= 1 and entry["ranks"] for entry in prop["rank_output"])


def test_output_log_counts_examples_per_distinct_output():
    log = rank_output.OutputLog()
    out = rank_output.RankOutput((("UserWarning", "w", "f.py:1"),), "line one\nline two\n")
    with log.collecting("t"):
        log.add({0: out, 1: out})
        log.add({1: out})
    assert log.summary() == [
        "t",
        "  2 examples, ranks 0, 1: UserWarning: w (f.py:1)",
        "  2 examples, ranks 0, 1: output: line one",
    ]
