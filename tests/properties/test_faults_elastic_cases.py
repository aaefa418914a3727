"""The fault and elastic cases refuse what they can't run, saying what to pass instead; their bounds."""

from __future__ import annotations

import pytest

from fuzzdist.errors import InvalidArgument
from fuzzdist.properties.elastic.cases import ElasticCase, Failure, RendezvousCase
from fuzzdist.properties.faults.cases import GRACE_S, FaultCase, world_deadline_s


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"world_size": 1}, "a fault needs a survivor"),
        ({"victim": 2}, "FaultCase(victim=2): expected a rank in [0, 2)"),
        ({"point": "elsewhere"}, "FaultCase(point='elsewhere'): expected one of before, during"),
        ({"exit_code": 0}, "an exit code in [1, 255]"),
    ],
)
def test_a_fault_case_refuses_what_it_cannot_run(fields, said):
    with pytest.raises(InvalidArgument) as raised:
        FaultCase(**fields)
    assert said in str(raised.value)


def test_the_world_deadline_covers_two_timed_out_operations():
    case = FaultCase(timeout_s=3.0)
    assert world_deadline_s(case) > 2 * (case.timeout_s + GRACE_S)


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: ElasticCase(nproc=1, failures=(Failure(rank=1),)), "outside 1 workers and 1 steps"),
        (lambda: Failure(signal="SIGSTOP"), "'' or one of SIGKILL, SIGTERM, SIGUSR1"),
        # more agents than MAX is drawn (the ones left out must exit gracefully); fewer than MIN can't form a group
        (
            lambda: RendezvousCase(agents=1, min_nodes=2, max_nodes=2),
            "expected 1 <= min_nodes <= agents and min_nodes <= max_nodes",
        ),
    ],
)
def test_an_elastic_case_refuses_what_it_cannot_run(make, said):
    with pytest.raises(InvalidArgument) as raised:
        make()
    assert said in str(raised.value)


def test_a_job_finishes_only_with_restarts_enough():
    assert ElasticCase(max_restarts=1, failures=(Failure(),)).finishes
    assert not ElasticCase(max_restarts=0, failures=(Failure(),)).finishes
