"""``--cover`` counts the lines of the processes a property starts itself: torchrun's agent and workers."""

from __future__ import annotations

import inspect
import os

import pytest
import torch.distributed.distributed_c10d as c10d

from fuzzdist.pool import line_coverage, process_cover
from fuzzdist.properties.elastic import launch
from fuzzdist.properties.elastic.cases import ElasticCase


@pytest.fixture
def cover():
    """Coverage of torch.distributed on, its lines counted in the scope "elastic"."""
    ledger = line_coverage.enable(["torch.distributed"])
    line_coverage.set_scope("elastic")
    try:
        yield ledger
    finally:
        line_coverage.disable()


def _function_lines(fn) -> set[int]:
    source, first = inspect.getsourcelines(fn)
    return set(range(first, first + len(source)))


def test_an_elastic_job_under_cover_counts_its_agent_s_and_worker_s_lines(cover, tmp_path):
    code = launch.run_job(ElasticCase(nproc=1, steps=1, max_restarts=0), str(tmp_path), launch.torchrun)
    assert code == 0, launch.log_tail(str(tmp_path))
    reached = cover.by_scope.get("elastic", {})
    agent = [f for f in reached if os.sep.join(("distributed", "elastic", "agent")) in f]
    assert agent, sorted(reached)[:20]  # torchrun's agent, in the wrapped process
    worker = reached.get(os.path.realpath(c10d.__file__), set()) & _function_lines(c10d.init_process_group)
    assert worker  # init_process_group is called by the worker only


def test_coverage_off_adds_nothing_to_the_environment():
    line_coverage.disable()
    with process_cover.gathering() as env:
        assert env == {}


def test_a_fault_world_under_cover_counts_its_ranks_lines(cover):
    from fuzzdist.properties.faults.cases import FaultCase
    from fuzzdist.properties.faults.launch import run_world
    from fuzzdist.properties.faults.rank import dcp_load, run_collective

    outcome = run_world(FaultCase(), run_collective, dcp_load)
    assert not outcome.problems, outcome
    reached = cover.by_scope.get("elastic", {}).get(os.path.realpath(c10d.__file__), set())
    assert reached & _function_lines(c10d.destroy_process_group)  # only the survivor, after the death, runs it
