"""Elastic restarts: ``torchrun`` with ``--max-restarts`` restarts the whole worker group after a worker's
failure, as often as documented; a job that checkpoints finishes with the result a run without failures
computes; and a c10d rendezvous with ``--nnodes MIN:MAX`` on one machine admits exactly the agents that
joined, up to MAX.

Modules: ``cases`` (``ElasticCase``, ``Failure``, ``RendezvousCase`` and their strategies), ``launch`` (the
driver side: torchrun as subprocesses, the deadlines, what the workers recorded), ``worker`` (the job
torchrun runs, a script with torch alone), ``known_bugs`` (the torch bugs this family runs into).

Restarts.  For any drawn :class:`~fuzzdist.properties.elastic.cases.ElasticCase` (1 or 2 workers on one
node, 1 to 3 steps, ``--max-restarts`` 0 to 2, up to one failure more than the restarts, each killing a
drawn worker at a drawn step before or after its ``all_reduce``, by ``os._exit`` with a drawn code or by
SIGKILL, SIGTERM or SIGUSR1), ``torchrun --standalone`` runs the job of ``worker.py``, which checkpoints
after every step and resumes from its checkpoint.  torchrun's documentation: ``--max-restarts``: "Maximum
number of worker group restarts before failing"; "Fault tolerant (fixed sized number of workers, no
elasticity, tolerates 3 failures) ... --max-restarts=3"; ``TORCHELASTIC_RESTART_COUNT``: "The number of
worker group restarts so far"; the agent "Supports retrying the worker group on failures up to
``max_restarts``" (``SimpleElasticAgent._invoke_run``).  So, with F failures and R restarts:

* F <= R: torchrun exits 0; the group was started F + 1 times (attempts 0..F, each with every rank of
  ``WORLD_SIZE`` = the workers, each of which joins its group); the job's result equals the reference
  computed locally (the sum of every rank's term at every step), bitwise;
* F > R: torchrun exits non-zero after R + 1 attempts, and the job never finishes.

Rendezvous.  For any drawn :class:`~fuzzdist.properties.elastic.cases.RendezvousCase`, ``agents`` torchrun
agents of one worker each start at once with ``--nnodes MIN:MAX`` ("Number of nodes, or the range of nodes
in form <minimum_nodes>:<maximum_nodes>"), ``--rdzv-backend=c10d`` on a local port, MIN <= agents (and
agents up to MAX + 1 or more).  The rendezvous' documentation (``torch/distributed/elastic/rendezvous/
__init__.py``): "If ``max`` number of nodes is gathered at the barrier, the rendezvous is completed
immediately"; "additional 'late' nodes attempting to rendezvous will only announce themselves as waiting,
and will have to wait until the (previously completed) existing rendezvous is destroyed first"; and the
agent left out then ends with ``RendezvousGracefulExitError``, "Raised when node wasn't included in
rendezvous and gracefully exits. Exception is a mechanism to exit the stack, however does not mean a
failure" (``torch/distributed/elastic/rendezvous/api.py``).  So every agent exits 0 within the deadline,
and the one group formed holds exactly min(agents, MAX) of them: ``WORLD_SIZE`` = that on every worker,
``RANK`` and ``GROUP_RANK`` each 0..that-1 once.  With fewer agents than MAX the rendezvous waits its
``last_call_timeout`` (set to :data:`~fuzzdist.properties.elastic.launch.LAST_CALL_S`) once MIN joined.

The agent under test is a keyword of :func:`check_restarts`: ``agent(args, env, deadline_s, log)`` (default:
``launch.torchrun``).  Every example starts fresh interpreters (torchrun, each worker, each restart):
seconds each; their cost is in bench/RESULTS.md.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from typing import Any

import torch

from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties.elastic import launch
from fuzzdist.properties.elastic.cases import ElasticCase, Failure, RendezvousCase, elastic_cases, rendezvous_cases
from fuzzdist.properties.elastic.worker import contribution

__all__ = [
    "ElasticCase",
    "Failure",
    "RendezvousCase",
    "check_rendezvous",
    "check_restarts",
    "elastic_cases",
    "expected_total",
    "rendezvous_cases",
    "rendezvous_problems",
    "restart_problems",
]

NOT_JOINED = "not_joined"
"""The ``subject`` of a problem about workers of an attempt that started but never joined their group."""


def expected_total(case: ElasticCase) -> list[float]:
    """The job's result without failures, computed locally: every rank's term at every step, summed."""
    total = torch.zeros(4, dtype=torch.float64)
    for step in range(case.steps):
        for rank in range(case.nproc):
            total += contribution(rank, step)
    return [float(x) for x in total]


def _attempt_problems(case: ElasticCase, seen: list[dict[str, Any]], attempts: int) -> list[Problem]:
    """Problems with the attempts the workers recorded: ``attempts`` of them, each with every rank once,
    of the documented world size, and every rank of every attempt joined its group."""
    problems = []
    started = sorted({s["attempt"] for s in seen if s["event"] == "started"})
    if started != list(range(attempts)):
        problems.append(
            Problem(
                Kind.MISMATCH,
                "the attempts the workers saw (TORCHELASTIC_RESTART_COUNT)",
                got=tuple(started),
                expected=tuple(range(attempts)),
                hint="the agent restarts the whole group once per failure, up to --max-restarts",
            )
        )
    for attempt in started:
        for event in ("started", "joined"):
            ranks = Counter(s["rank"] for s in seen if s["attempt"] == attempt and s["event"] == event)
            sizes = {s["world_size"] for s in seen if s["attempt"] == attempt and s["event"] == event}
            if event == "started" and (sorted(ranks.elements()) != list(range(case.nproc)) or sizes != {case.nproc}):
                problems.append(
                    Problem(
                        Kind.MISMATCH,
                        f"attempt {attempt}'s workers (RANK, WORLD_SIZE)",
                        got=(tuple(sorted(ranks.elements())), tuple(sorted(sizes))),
                        expected=(tuple(range(case.nproc)), (case.nproc,)),
                    )
                )
            # A worker that dies as planned has joined first; one that never joined failed in the group's set-up.
            if event == "joined" and sorted(ranks) != list(range(case.nproc)):
                problems.append(
                    Problem(
                        Kind.RAISED,
                        f"attempt {attempt}: ranks {sorted(set(range(case.nproc)) - set(ranks))} started but never "
                        "joined their group (init_process_group failed)",
                        subject=(NOT_JOINED, attempt),
                        hint="see the agent's log in the failure's detail",
                    )
                )
    return problems


def restart_problems(case: ElasticCase, code: int | None, workdir: str) -> list[Problem]:
    """What the restart contract finds wrong in the job ``case`` ran in ``workdir``, exiting with ``code``."""
    if code is None:
        return [
            Problem(
                Kind.HANG,
                f"torchrun still running after {launch.restart_deadline_s(case):.0f} s",
                hint="the agent must finish or fail the job",
            )
        ]
    seen = launch.workers_seen(workdir)
    done = launch.result(workdir)
    problems = []
    if case.finishes:
        problems.extend(_attempt_problems(case, seen, len(case.failures) + 1))
        if code != 0:
            problems.append(
                Problem(
                    Kind.RAISED,
                    f"torchrun exited {code} after {len(case.failures)} failures, "
                    f"with --max-restarts={case.max_restarts}",
                    got=code,
                    expected=0,
                )
            )
        if done is None:
            problems.append(Problem(Kind.MISSING, "the job's result: it never finished"))
        elif done["total"] != expected_total(case) or done["step"] != case.steps:
            problems.append(
                Problem(
                    Kind.MISMATCH,
                    "the job's result after its restarts",
                    got=(done["step"], tuple(done["total"])),
                    expected=(case.steps, tuple(expected_total(case))),
                    hint="a job resumed from its checkpoints must finish as a run without failures",
                )
            )
    else:
        problems.extend(_attempt_problems(case, seen, case.max_restarts + 1))
        if code == 0 or done is not None:
            problems.append(
                Problem(
                    Kind.MISMATCH,
                    f"torchrun exited {code} with {len(case.failures)} failures and --max-restarts={case.max_restarts}",
                    got=code,
                    expected="non-zero, the job unfinished",
                )
            )
    return problems


def _fail(claim: str, problems: list[Problem], workdir: str) -> None:
    """Raise :class:`PropertyFailure` with ``problems`` and the agents' last lines."""
    words = "\n".join(f"  {p}" for p in problems)
    raise PropertyFailure(f"{claim}:\n{words}\n{launch.log_tail(workdir)}", [], problems)


def check_restarts(case: ElasticCase, *, agent: launch.Agent = launch.torchrun) -> None:
    """Run ``case``'s job under ``agent``; raise :class:`PropertyFailure` if it restarts, finishes or fails
    otherwise than documented."""
    workdir = tempfile.mkdtemp(prefix="fuzzdist-elastic-")
    try:
        with known_failures("elastic", case=case):
            problems = restart_problems(case, launch.run_job(case, workdir, agent), workdir)
            if problems:
                claim = f"torchrun with --max-restarts={case.max_restarts} and {len(case.failures)} failures"
                _fail(claim, problems, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def rendezvous_problems(case: RendezvousCase, codes: list[int | None], workdir: str) -> list[Problem]:
    """What the rendezvous contract finds wrong: every agent exits 0, and one group of exactly
    ``case.admitted`` workers formed.  An agent's non-zero exit carries the end of its log as ``trace`` (what
    torch printed)."""
    problems = []
    for i, code in enumerate(codes):
        if code != 0:
            kind = Kind.HANG if code is None else Kind.RAISED
            trace = launch.agent_log_tail(workdir, i)
            problems.append(Problem(kind, f"agent {i} exited {code}", got=code, expected=0, trace=trace))
    joined = [s for s in launch.workers_seen(workdir) if s["event"] == "joined"]
    want = tuple(range(case.admitted))
    got = (
        tuple(sorted(s["rank"] for s in joined)),
        tuple(sorted(s["group_rank"] for s in joined)),
        tuple(sorted({s["world_size"] for s in joined})),
    )
    if got != (want, want, (case.admitted,)):
        problems.append(
            Problem(
                Kind.MISMATCH,
                f"the workers admitted (RANK, GROUP_RANK, WORLD_SIZE) of {case.agents} agents with "
                f"--nnodes={case.min_nodes}:{case.max_nodes}",
                got=got,
                expected=(want, want, (case.admitted,)),
                hint="the rendezvous admits every agent that joined, up to MAX",
            )
        )
    return problems


def check_rendezvous(case: RendezvousCase) -> None:
    """Start ``case.agents`` agents on one c10d rendezvous; raise :class:`PropertyFailure` unless one group
    of exactly ``case.admitted`` of them formed and finished, and every agent exited 0."""
    workdir = tempfile.mkdtemp(prefix="fuzzdist-elastic-")
    try:
        with known_failures("elastic", case=case):
            problems = rendezvous_problems(case, launch.run_rendezvous(case, workdir), workdir)
            if problems:
                _fail(f"{case.agents} agents with --nnodes={case.min_nodes}:{case.max_nodes}", problems, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
