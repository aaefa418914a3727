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
    return check_process_group(f"helpers.wrapping_pg:{factory}", world_sizes=(2,),
                               dtypes=(torch.bool, torch.int32), max_examples=15, pools=pools,
                               settings=REPEATABLE, **fields)


def test_gloos_known_bugs_through_a_wrapper_are_known_inherited_from_gloo(pools):
    report = _check(pools, "wrapper", ops=CHECKS, wraps="gloo")
    assert report.conforms, report.summary()
    assert report.backend == "acme"  # the registry alone would not take it for gloo
    known = {name: {k["id"]: k for k in report.ops[name].known} for name in CHECKS}
    assert {name: report.ops[name].status for name in CHECKS} == dict.fromkeys(CHECKS, "known"), report.summary()
    for name, bug in [("allreduce", "gloo-bool-sum-stores-2"), ("reduce_scatter", "gloo-bool-sum-stores-2"),
                      (ASYNC, "gloo-p2p-second-wait-blocks")]:
        assert known[name][bug]["inherited_from"] == "gloo", report.summary()
    assert f"KNOWN gloo-bool-sum-stores-2 x{known['allreduce']['gloo-bool-sum-stores-2']['count']} (inherited from " \
           "gloo: gloo itself gives the same result)" in report.summary()


def test_without_wraps_the_same_wrapper_fails(pools):
    report = _check(pools, "wrapper", ops=("allreduce",))
    assert not report.conforms
    assert "hold a byte other than 0 and 1 (bytes [2]" in report.failures[0].message, report.summary()


def test_a_planted_deviation_that_looks_like_gloos_bug_is_still_a_failure(pools):
    # bool SUM leaves the byte 3 (gloo leaves 2): the registry's symptom matches, gloo's result doesn't
    report = _check(pools, "bool_sum_three", ops=("allreduce", "reduce_scatter"), wraps="gloo")
    assert report.ops["allreduce"].status == "failed", report.summary()
    assert "bytes [3]" in report.ops["allreduce"].failure.message
    assert report.ops["reduce_scatter"].status == "known"  # its reduce_scatter is gloo's, unchanged


def test_wraps_names_a_backend_fuzzdist_can_run(capsys):
    with pytest.raises(InvalidArgument, match="wraps='nccl'"):
        check_process_group("helpers.wrapping_pg:wrapper", world_sizes=(1,), wraps="nccl")
    assert main(["check-pg", "helpers.wrapping_pg:wrapper", "--wraps", "mpi"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--wraps" in err[0], err
