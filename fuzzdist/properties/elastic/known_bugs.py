"""The known torch bugs the elastic property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import every_problem, example_of
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.elastic import NOT_JOINED
from fuzzdist.properties.elastic.cases import ElasticCase, RendezvousCase


def _restart_left_stale(case: ElasticCase, problem: Problem) -> bool:
    """Whether ``problem`` is what elastic-restart-reuses-stale-store leaves: a restarted attempt whose workers
    never joined their group, and what follows from it (the job unfinished, torchrun's non-zero exit, fewer
    attempts than failures, the attempts after it never started)."""
    if problem.subject[:1] == (NOT_JOINED,):
        return isinstance(problem.subject[1], int) and problem.subject[1] >= 1
    return problem.kind in (Kind.RAISED, Kind.MISSING, Kind.MISMATCH) and not problem.subject


def _is_stale_store(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A job of two or more workers restarted at least once, a restarted attempt's workers that never joined
    their group, and every other problem one that follows from it."""
    case = example_of(example, "case", ElasticCase)
    if case is None or case.nproc < 2 or not case.failures or case.max_restarts < 1:
        return False
    problems = evidence.reported(failure) or []
    if not any(p.subject[:1] == (NOT_JOINED,) and p.subject[1] >= 1 for p in problems):
        return False
    return every_problem(failure, lambda p: _restart_left_stale(case, p))


register(KnownBug(id="elastic-restart-reuses-stale-store", where=("elastic",), recognise=_is_stale_store))


_NONE_RESULT = "'NoneType' object has no attribute 'is_failed'"
"""What torchrun's ``launch_agent`` raises when the agent's ``run()`` returned None (torch's words)."""
_STORE_LOST = "The connection to the C10d store has failed"
"""What the rendezvous raises when the agent hosting its store is gone (torch's words)."""


def _is_left_out_agent_failure(example: Mapping[str, Any], failure: BaseException) -> bool:
    """More agents than ``--nnodes``' maximum, and every problem an agent that exited 1 on
    ``launch_agent``'s ``result.is_failed()`` of None or on the lost store, no more of them than the agents
    left out (the group itself formed as documented)."""
    case = example_of(example, "case", RendezvousCase)
    if case is None or case.agents <= case.max_nodes:
        return False
    problems = evidence.reported(failure) or []
    if len(problems) > case.agents - case.admitted:
        return False
    return every_problem(
        failure,
        lambda p: (
            p.kind is Kind.RAISED and p.got == 1 and (evidence.says(p, _NONE_RESULT) or evidence.says(p, _STORE_LOST))
        ),
    )


register(KnownBug(id="elastic-left-out-agent-fails", where=("elastic",), recognise=_is_left_out_agent_failure))
