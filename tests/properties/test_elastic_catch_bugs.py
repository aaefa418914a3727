"""The elastic property can fail: an agent that never restarts the worker group is caught and shrunk to a
minimal example."""

from __future__ import annotations

from functools import partial

from helpers import planted_elastic
from helpers.minimal import minimal_failure

from fuzzdist.properties import elastic
from fuzzdist.properties.elastic.cases import ElasticCase, Failure


def test_elastic_catches_an_agent_that_does_not_restart():
    f = minimal_failure(
        partial(elastic.check_restarts, agent=planted_elastic.never_restarting_agent),
        case=elastic.elastic_cases(max_nproc=1),
    )
    # One worker (a group of one restarts even on torch's own agent), one step, one failure and one restart
    # allowed: the smallest job a restart must save, its worker killed before its all_reduce.  SIGKILL, not
    # os._exit: a signal's failure is one draw shorter (no exit code), which Hypothesis's shrinker prefers.
    assert f.case == ElasticCase(steps=1, max_restarts=1, failures=(Failure(signal="SIGKILL"),)), f.case
    assert "torchrun exited 1 after 1 failures, with --max-restarts=1" in str(f.error)
