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


# elastic-restart-reuses-stale-store is a race: this pinned example, its minimal one (2 workers whose rank 0
# exits before its first all_reduce, one restart allowed), gives every run a chance to meet it (reported KNOWN
# when it does).  Measured on a loaded 2-core machine (load average near 28): met in 3 of 8 runs, the other 5
# passed.  With rank 1 exiting instead it was met in 4 of 8, but 2 of those 8 (and 1 more run) ran past the
# example's 150-s deadline with torchrun still running, a failure no known bug explains: not pinned.
@_fewer
@given(case=elastic.elastic_cases())
@example(case=ElasticCase(nproc=2, steps=1, max_restarts=1, failures=(Failure(),)))
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
