"""The faults property can fail: a survivor that swallows its collective's error, and a loader that accepts
a checkpoint half-written by a dead rank, are caught and shrunk to a minimal example."""

from __future__ import annotations

from functools import partial

from helpers import planted_faults
from helpers.minimal import minimal_failure

from fuzzdist.problems import Kind
from fuzzdist.properties import faults
from fuzzdist.properties.faults.cases import FaultCase


def test_faults_catch_a_survivor_that_swallows_the_error():
    f = minimal_failure(
        partial(faults.check, collective=planted_faults.swallowing_collective), case=faults.fault_cases()
    )
    # Everything shrinks away: two ranks, rank 0 dying by os._exit(1) before an all_reduce of one element.
    assert f.case == FaultCase(), f.case
    kinds = {p.kind for p in f.error.problems}
    # The survivor's all_reduce returned its own input as the sum, and it never saw an error.
    assert kinds == {Kind.MISMATCH, Kind.MISSING}, f.error
    assert all(p.rank == 1 for p in f.error.problems), f.error
    assert "no error on a survivor after rank 0 died" in str(f.error)


def test_faults_catch_a_loader_that_accepts_a_half_written_checkpoint():
    f = minimal_failure(partial(faults.check, load=planted_faults.lenient_load), case=faults.fault_cases())
    # The victim dies in its save's first stage (its local plan): nothing is written, yet the load "works".
    assert f.case == FaultCase(point="dcp_save"), f.case
    assert {p.kind for p in f.error.problems} == {Kind.MISMATCH}, f.error
    assert "loaded without an error from a checkpoint half-written by a dead rank" in str(f.error)
