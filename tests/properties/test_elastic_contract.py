"""The elastic property's contract checks and its known bug's predicate, on recorded outcomes (no torchrun
started): what the workers wrote to ``workers.log`` and ``result.json``, and torchrun's exit code."""

from __future__ import annotations

import json

import pytest

from fuzzdist import known_bugs
from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Kind
from fuzzdist.properties import PropertyFailure, elastic
from fuzzdist.properties.elastic.cases import ElasticCase, Failure

TWO_WORKERS_ONE_RESTART = ElasticCase(nproc=2, steps=1, max_restarts=1, failures=(Failure(),))


def _record(tmp_path, events, total=None, steps=1):
    """Write what workers would have written: ``events`` as (attempt, rank, event), and the result."""
    with open(tmp_path / "workers.log", "w") as log:
        for attempt, rank, event in events:
            log.write(json.dumps({"attempt": attempt, "rank": rank, "world_size": 2, "group_rank": 0, "event": event}))
            log.write("\n")
    if total is not None:
        (tmp_path / "result.json").write_text(json.dumps({"total": total, "step": steps}))
    return str(tmp_path)


def _both(attempt, *events):
    return [(attempt, rank, event) for event in events for rank in (0, 1)]


def test_a_restarted_job_that_finishes_right_has_no_problem(tmp_path):
    workdir = _record(
        tmp_path,
        _both(0, "started", "joined") + _both(1, "started", "joined"),
        total=elastic.expected_total(TWO_WORKERS_ONE_RESTART),
    )
    assert elastic.restart_problems(TWO_WORKERS_ONE_RESTART, 0, workdir) == []


def test_a_wrong_result_after_restarts_is_a_mismatch(tmp_path):
    wrong = [x + 1 for x in elastic.expected_total(TWO_WORKERS_ONE_RESTART)]
    workdir = _record(tmp_path, _both(0, "started", "joined") + _both(1, "started", "joined"), total=wrong)
    (problem,) = elastic.restart_problems(TWO_WORKERS_ONE_RESTART, 0, workdir)
    assert problem.kind is Kind.MISMATCH and "the job's result" in problem.what


def test_more_failures_than_restarts_must_fail(tmp_path):
    case = ElasticCase(nproc=2, steps=1, max_restarts=0, failures=(Failure(),))
    workdir = _record(tmp_path, _both(0, "started", "joined"))
    assert elastic.restart_problems(case, 1, workdir) == []
    (problem,) = elastic.restart_problems(case, 0, workdir)  # torchrun said the job succeeded
    assert problem.kind is Kind.MISMATCH


def _failure_of(case, code, workdir):
    problems = elastic.restart_problems(case, code, workdir)
    return PropertyFailure("recorded", [], problems)


def test_the_stale_store_bug_is_recognised(tmp_path):
    # torch's bug: attempt 1's workers start but never join their group; torchrun exits 1.
    workdir = _record(tmp_path, _both(0, "started", "joined") + _both(1, "started"))
    failure = _failure_of(TWO_WORKERS_ONE_RESTART, 1, workdir)
    bug = known_bugs.recognise("elastic", {"case": TWO_WORKERS_ONE_RESTART}, failure)
    assert bug is not None and bug.id == "elastic-restart-reuses-stale-store"


@pytest.mark.parametrize(
    "events",
    [
        _both(0, "started", "joined"),  # never restarted: an agent that ignores --max-restarts
        _both(0, "started") + _both(1, "started"),  # the first attempt never joined: not a restart's stale keys
    ],
)
def test_other_failures_are_not_taken_for_the_stale_store_bug(tmp_path, events):
    failure = _failure_of(TWO_WORKERS_ONE_RESTART, 1, _record(tmp_path, events))
    assert failure.problems
    assert known_bugs.recognise("elastic", {"case": TWO_WORKERS_ONE_RESTART}, failure) is None


def _joined(tmp_path, workers):
    """Write the ``joined`` lines of ``workers``, each (rank, group_rank, world_size)."""
    with open(tmp_path / "workers.log", "w") as log:
        for rank, group_rank, world_size in workers:
            event = {"attempt": 0, "rank": rank, "world_size": world_size, "group_rank": group_rank, "event": "joined"}
            log.write(json.dumps(event) + "\n")
    return str(tmp_path)


def test_a_rendezvous_of_exactly_the_agents_has_no_problem(tmp_path):
    case = elastic.RendezvousCase(agents=2, min_nodes=1, max_nodes=3)
    assert elastic.rendezvous_problems(case, [0, 0], _joined(tmp_path, [(0, 0, 2), (1, 1, 2)])) == []


@pytest.mark.parametrize(
    ("codes", "workers"),
    [
        ([0, 0], [(0, 0, 1), (0, 0, 1)]),  # two groups of one: the agents never met
        ([0, None], [(0, 0, 2)]),  # one agent left out, still waiting at the deadline
    ],
)
def test_a_rendezvous_that_admits_otherwise_is_a_problem(tmp_path, codes, workers):
    case = elastic.RendezvousCase(agents=2, min_nodes=1, max_nodes=3)
    problems = elastic.rendezvous_problems(case, codes, _joined(tmp_path, workers))
    assert any(p.kind is Kind.MISMATCH and "--nnodes=1:3" in p.what for p in problems)


ONE_TOO_MANY = elastic.RendezvousCase(agents=2, min_nodes=1, max_nodes=1)
_NONE_RESULT = "AttributeError: 'NoneType' object has no attribute 'is_failed'"
_STORE_LOST = "RendezvousConnectionError: The connection to the C10d store has failed."


def _agent_said(tmp_path, agent, text):
    """Write what rendezvous agent ``agent`` printed."""
    (tmp_path / f"agent{agent}.log").write_text(f"Traceback (most recent call last):\n{text}\n")


def test_more_agents_than_max_admit_max(tmp_path):
    # One group of two workers: the third agent, left out, is in none.
    case = elastic.RendezvousCase(agents=3, min_nodes=1, max_nodes=2)
    assert case.admitted == 2
    assert elastic.rendezvous_problems(case, [0, 0, 0], _joined(tmp_path, [(0, 0, 2), (1, 1, 2)])) == []


def test_admitting_every_agent_beyond_max_is_a_problem(tmp_path):
    workers = [(0, 0, 2), (1, 1, 2)]  # both agents admitted where --nnodes=1:1 allows one
    (problem,) = elastic.rendezvous_problems(ONE_TOO_MANY, [0, 0], _joined(tmp_path, workers))
    assert problem.kind is Kind.MISMATCH and problem.expected == ((0,), (0,), (1,))


@pytest.mark.parametrize("said", [_NONE_RESULT, _STORE_LOST])
def test_the_left_out_agent_failing_is_recognised(tmp_path, said):
    workdir = _joined(tmp_path, [(0, 0, 1)])
    _agent_said(tmp_path, 1, said)
    failure = PropertyFailure("recorded", [], elastic.rendezvous_problems(ONE_TOO_MANY, [0, 1], workdir))
    bug = known_bugs.recognise("elastic", {"case": ONE_TOO_MANY}, failure)
    assert bug is not None and bug.id == "elastic-left-out-agent-fails"


@pytest.mark.parametrize(
    ("case", "codes", "workers", "said"),
    [
        # no agent beyond the maximum: a failing agent is another bug
        (elastic.RendezvousCase(agents=2, min_nodes=1, max_nodes=2), [0, 1], [(0, 0, 2), (1, 1, 2)], _NONE_RESULT),
        # the agent left out hung instead (None: killed at the deadline)
        (ONE_TOO_MANY, [0, None], [(0, 0, 1)], _NONE_RESULT),
        # the agent exited 1 for another reason
        (ONE_TOO_MANY, [0, 1], [(0, 0, 1)], "RuntimeError: something else"),
        # both agents failed: more than the one left out
        (ONE_TOO_MANY, [1, 1], [(0, 0, 1)], _NONE_RESULT),
        # the group itself formed wrong
        (ONE_TOO_MANY, [0, 1], [(0, 0, 2)], _NONE_RESULT),
    ],
)
def test_other_rendezvous_failures_are_not_the_left_out_agent_bug(tmp_path, case, codes, workers, said):
    workdir = _joined(tmp_path, workers)
    for agent in range(case.agents):
        _agent_said(tmp_path, agent, said)
    failure = PropertyFailure("recorded", [], elastic.rendezvous_problems(case, codes, workdir))
    assert failure.problems
    assert known_bugs.recognise("elastic", {"case": case}, failure) is None


def test_a_rendezvous_case_needs_min_within_the_agents_and_max():
    assert elastic.RendezvousCase(agents=3, min_nodes=1, max_nodes=1).admitted == 1
    with pytest.raises(InvalidArgument, match="expected 1 <= min_nodes <= agents and min_nodes <= max_nodes"):
        elastic.RendezvousCase(agents=1, min_nodes=2, max_nodes=2)


def test_a_restart_example_s_deadline_grows_with_the_interpreters_it_starts():
    from fuzzdist.properties.elastic import launch

    one = launch.restart_deadline_s(ElasticCase(nproc=1, steps=2, max_restarts=1))
    assert one > 90.0  # a flat 90 s ran out under load for this case, with no restart in it
    assert launch.restart_deadline_s(ElasticCase(nproc=2, steps=2, max_restarts=1)) > one
    assert launch.restart_deadline_s(TWO_WORKERS_ONE_RESTART) > launch.restart_deadline_s(
        ElasticCase(nproc=2, steps=1, max_restarts=1)
    )
