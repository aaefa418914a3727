"""Elastic restarts: ``torchrun --max-restarts`` restarts the worker group after drawn failures (exit codes,
signals) as documented, a job that checkpoints finishes with the result computed without failures, and a
c10d rendezvous with ``--nnodes MIN:MAX`` on one machine admits exactly the agents that joined, up to MAX
(``fuzzdist.properties.elastic``).

Each example starts torchrun and its workers as fresh interpreters, again at every restart: seconds each
(bench/RESULTS.md), so these tests run a small share of the profile's examples."""

from __future__ import annotations

from hypothesis import example, given, settings

from fuzzdist.properties import elastic
from fuzzdist.properties.elastic.cases import ElasticCase, Failure, RendezvousCase

_SHARE = 20  # each example costs one to four torchrun attempts, each importing torch in every worker


def _fewer(test):
    """``test`` with a share of the profile's examples, at least two."""
    return settings(max_examples=max(2, settings().max_examples // _SHARE))(test)


# elastic-restart-reuses-stale-store is a race: this pinned example, 2 workers whose rank 1 exits before its
# first all_reduce, one restart allowed, gives every run a chance to meet it (reported KNOWN when it does).
# Measured on a loaded 2-core machine: met in 4 of 8 runs (rank 0 exiting instead: 3 of 8); 2 of the 8 ran
# past the example's deadline instead.
@_fewer
@given(case=elastic.elastic_cases())
@example(case=ElasticCase(nproc=2, steps=1, max_restarts=1, failures=(Failure(rank=1),)))
def test_torchrun_restarts_as_documented(case):
    """With no more failures than ``--max-restarts`` the group restarts once per failure and the job
    finishes with the reference's result; with more, torchrun fails after ``--max-restarts`` restarts."""
    elastic.check_restarts(case)


# One agent more than --nnodes' maximum: the smallest case of elastic-left-out-agent-fails (reported KNOWN).
@_fewer
@given(case=elastic.rendezvous_cases())
@example(case=RendezvousCase(agents=2, min_nodes=1, max_nodes=1))
def test_rendezvous_admits_the_agents_that_joined(case):
    """Agents started at once with ``--nnodes MIN:MAX`` form one group of exactly those agents, up to MAX;
    every agent, those left out too, exits 0."""
    elastic.check_rendezvous(case)
