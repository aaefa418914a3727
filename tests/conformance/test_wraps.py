"""check-pg's ``wraps`` (``--wraps gloo``): a group that delegates to gloo under a name of its own meets
gloo's known bugs; they are KNOWN, inherited from gloo, where gloo itself gives the same result on the
same call, and a deviation of the group's own that looks like one is still a failure."""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings

from fuzzdist.cli import main
from fuzzdist.conformance import ASYNC, check_process_group
from fuzzdist.driver.plugin import PoolKey
from fuzzdist.errors import InvalidArgument

REPEATABLE = settings(derandomize=True, database=None)
CHECKS = ("allreduce", "reduce_scatter", ASYNC)


@pytest.fixture(scope="module")
def pools(request, rank_pools):
    timeout = request.config.getoption("fuzzdist_timeout")
    return lambda world_size: rank_pools.get(PoolKey(world_size, "gloo", "cpu", timeout))


def _check(pools, factory, **fields):
    fields = {"dtypes": (torch.bool, torch.int32), "max_examples": 15, **fields}
    return check_process_group(
        f"helpers.wrapping_pg:{factory}", world_sizes=(2,), pools=pools, settings=REPEATABLE, **fields
    )


def _expected_statuses(gloo_refuses, checks, status):
    """``status`` for every check, but "unsupported" for an operation the installed gloo lacks (torch
    2.6.0's gloo: the list-form reduce_scatter): a wrapper can't inherit a bug from what gloo lacks."""
    return {name: "unsupported" if gloo_refuses.get(name) else status for name in checks}


def test_gloos_known_bugs_through_a_wrapper_are_known_inherited_from_gloo(pools, gloo_refuses):
    report = _check(pools, "wrapper", ops=CHECKS, wraps="gloo")
    assert report.conforms, report.summary()
    assert report.backend == "acme"  # the registry alone would not take it for gloo
    known = {name: {k["id"]: k for k in report.ops[name].known} for name in CHECKS}
    expected = _expected_statuses(gloo_refuses, CHECKS, "known")
    assert {name: report.ops[name].status for name in CHECKS} == expected, report.summary()
    for name, bug in [("allreduce", "gloo-bool-sum-stores-2"), ("reduce_scatter", "gloo-bool-sum-stores-2")]:
        if expected[name] == "unsupported":
            assert [u.reason for u in report.unsupported if u.op == name] == [f"RuntimeError: {gloo_refuses[name]}"]
            continue
        assert known[name][bug]["inherited_from"] == "gloo", report.summary()
    # every sighting, in every check (the async one's too, whichever bugs its draws met), is gloo's, inherited
    assert all(k["inherited_from"] == "gloo" for name in CHECKS for k in known[name].values()), report.summary()
    # and a hang of gloo's, its failure run again on gloo: a second wait() on a send/recv Work blocks.  The
    # async check's draws over int32 meet it within 30 examples on torch 2.6.0 and 2.13.0 alike (over bool
    # and int32 as above, 2.6.0's draws, which lack reduce_scatter and AVG, do not)
    hangs = _check(pools, "wrapper", ops=(ASYNC,), wraps="gloo", dtypes=(torch.int32,), max_examples=30)
    assert hangs.conforms and hangs.ops[ASYNC].status == "known", hangs.summary()
    seen = {k["id"]: k for k in hangs.ops[ASYNC].known}
    assert seen["gloo-p2p-second-wait-blocks"]["inherited_from"] == "gloo", hangs.summary()
    assert (
        f"KNOWN gloo-bool-sum-stores-2 x{known['allreduce']['gloo-bool-sum-stores-2']['count']} (inherited from "
        "gloo: gloo itself gives the same result)" in report.summary()
    )


def test_without_wraps_the_same_wrapper_fails_naming_gloos_bug_and_wraps(pools):
    report = _check(pools, "wrapper", ops=("allreduce",))
    assert not report.conforms
    message = report.failures[0].message
    assert "hold a byte other than 0 and 1 (bytes [2]" in message, report.summary()
    # gloo itself, run on the same call, stores the same bytes: the failure says which bug, and what to do
    hint = message.splitlines()[-1]
    assert hint.startswith("  hint: this is exactly what gloo's known bug 'gloo-bool-sum-stores-2' gives"), message
    assert "run again with --wraps gloo" in hint, message


def test_without_wraps_a_deviation_gloo_does_not_share_gets_no_hint(pools):
    # bool SUM leaves the byte 3: the bug's symptom, but gloo itself stores 2, so it is not gloo's bug
    report = _check(pools, "bool_sum_three", ops=("allreduce",))
    assert report.ops["allreduce"].status == "failed", report.summary()
    assert "bytes [3]" in report.ops["allreduce"].failure.message
    assert "hint:" not in report.ops["allreduce"].failure.message, report.summary()


def test_a_planted_deviation_that_looks_like_gloos_bug_is_still_a_failure(pools, gloo_refuses):
    # bool SUM leaves the byte 3 (gloo leaves 2): the registry's symptom matches, gloo's result doesn't
    report = _check(pools, "bool_sum_three", ops=("allreduce", "reduce_scatter"), wraps="gloo")
    assert report.ops["allreduce"].status == "failed", report.summary()
    assert "bytes [3]" in report.ops["allreduce"].failure.message
    # its reduce_scatter is gloo's, unchanged: known where gloo has it, unsupported where gloo lacks it
    assert (
        report.ops["reduce_scatter"].status
        == _expected_statuses(gloo_refuses, ["reduce_scatter"], "known")["reduce_scatter"]
    ), report.summary()


def test_wraps_names_a_backend_fuzzdist_can_run(capsys):
    with pytest.raises(InvalidArgument, match="wraps='nccl'"):
        check_process_group("helpers.wrapping_pg:wrapper", world_sizes=(1,), wraps="nccl")
    assert main(["check-pg", "helpers.wrapping_pg:wrapper", "--wraps", "mpi"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--wraps" in err[0], err
