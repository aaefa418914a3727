"""The driver side of the elastic property: start ``torchrun`` (one agent, or several for a rendezvous) as
subprocesses on the job of ``worker.py``, bounded by a deadline after which each agent's whole session is
killed, and read back what the workers recorded."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from fuzzdist.pool import process_cover
from fuzzdist.properties.elastic.cases import ElasticCase, RendezvousCase

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
"""The job's script: torch and the standard library only (each worker start is a fresh interpreter)."""

START_S = 90.0
"""What the first attempt may take on a loaded machine: torchrun's and its workers' imports of torch."""

ATTEMPT_S = 60.0
"""What each further attempt may take: the agent noticing the failure, stopping and restarting workers."""

PER_PROCESS_S = 30.0
"""What each interpreter a restart example starts adds to its first attempt (the agent and every worker
import torch at once, on the same cores), and each worker to every restart: under a load of 25 to 38 on
two cores, a one-worker job ran past a flat 90 s with nothing logged yet."""

LAST_CALL_S = 10
"""The rendezvous' ``last_call_timeout`` when fewer agents than ``--nnodes``' maximum join: long enough for
every agent of the example to start on a loaded machine (torch's default is 30 s)."""

Agent = Callable[[Sequence[str], dict[str, str], float, str], "int | None"]
"""How an agent is started: ``(torchrun arguments, environment, deadline in seconds, log path)`` -> its exit
code, or None if it was still running at the deadline (then it and its workers were killed)."""

_INHERITED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def environment() -> dict[str, str]:
    """The driver's environment without what a launcher sets (an enclosing torchrun's), one thread each."""
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED and not k.startswith("TORCHELASTIC_")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def start_torchrun(args: Sequence[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``python -m torch.distributed.run ARGS`` in a session of its own (its workers with it), its output in
    the log file named by ``env['FUZZDIST_ELASTIC_LOG']``."""
    # under --cover the agent runs inside the recorder; its workers start recording themselves (worker.py)
    wrapper = ["-m", "fuzzdist.pool.process_cover"] if process_cover.VARIABLE in env else []
    with open(env["FUZZDIST_ELASTIC_LOG"], "ab") as log:
        return subprocess.Popen(
            [sys.executable, *wrapper, "-m", "torch.distributed.run", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def wait_or_kill(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    """``proc``'s exit code, or None if it runs past ``deadline`` (monotonic): then its session is killed."""
    try:
        return proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def torchrun(args: Sequence[str], env: dict[str, str], deadline_s: float, log: str) -> int | None:
    """The agent under test: torch's own ``torchrun``."""
    proc = start_torchrun(args, {**env, "FUZZDIST_ELASTIC_LOG": log})
    return wait_or_kill(proc, time.monotonic() + deadline_s)


def plan(case: ElasticCase) -> str:
    """The worker's first argument: the steps and failures, as JSON."""
    return json.dumps({"steps": case.steps, "failures": [asdict(f) for f in case.failures]})


def restart_args(case: ElasticCase, workdir: str) -> list[str]:
    """torchrun's arguments for ``case``: one node, standalone (c10d rendezvous on a free local port)."""
    return [
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={case.nproc}",
        f"--max-restarts={case.max_restarts}",
        "--monitor-interval=0.1",
        WORKER,
        plan(case),
        workdir,
    ]


def restart_deadline_s(case: ElasticCase) -> float:
    """The longest a restart example may run: the first attempt and every restart, each longer by the
    interpreters it starts (:data:`PER_PROCESS_S`)."""
    restarts = min(len(case.failures), case.max_restarts)
    first = START_S + PER_PROCESS_S * (1 + case.nproc)
    return first + (ATTEMPT_S + PER_PROCESS_S * case.nproc) * restarts


def run_job(case: ElasticCase, workdir: str, agent: Agent) -> int | None:
    """Run ``case``'s job under ``agent`` in ``workdir``: its exit code (None: killed at the deadline)."""
    log = os.path.join(workdir, "agent.log")
    with process_cover.gathering() as cover:
        return agent(restart_args(case, workdir), {**environment(), **cover}, restart_deadline_s(case), log)


def free_port() -> int:
    """A TCP port free on the loopback address now (the rendezvous' host agent binds it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rendezvous_args(case: RendezvousCase, workdir: str, port: int, run_id: str) -> list[str]:
    """One agent's torchrun arguments: ``--nnodes MIN:MAX``, one worker, c10d on ``127.0.0.1:port``."""
    return [
        f"--nnodes={case.min_nodes}:{case.max_nodes}",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf=last_call_timeout={LAST_CALL_S},join_timeout={int(START_S)}",
        "--max-restarts=0",
        "--monitor-interval=0.1",
        WORKER,
        plan(ElasticCase()),
        workdir,
    ]


def run_rendezvous(case: RendezvousCase, workdir: str) -> list[int | None]:
    """Start ``case.agents`` agents at once on one rendezvous; their exit codes (None: killed at the
    deadline)."""
    port, run_id = free_port(), uuid.uuid4().hex[:12]
    with process_cover.gathering() as cover:
        return _rendezvous(case, workdir, port, run_id, {**environment(), **cover})


def _rendezvous(case: RendezvousCase, workdir: str, port: int, run_id: str, env: dict[str, str]) -> list[int | None]:
    """Start the agents of :func:`run_rendezvous` with ``env`` and wait for them, up to the deadline."""
    procs = [
        start_torchrun(
            rendezvous_args(case, workdir, port, run_id),
            {**env, "FUZZDIST_ELASTIC_LOG": os.path.join(workdir, f"agent{i}.log")},
        )
        for i in range(case.agents)
    ]
    deadline = time.monotonic() + START_S + LAST_CALL_S + ATTEMPT_S
    return [wait_or_kill(p, deadline) for p in procs]


def workers_seen(workdir: str) -> list[dict[str, Any]]:
    """What each worker recorded when it started, in order."""
    path = os.path.join(workdir, "workers.log")
    if not os.path.exists(path):
        return []
    with open(path) as log:
        return [json.loads(line) for line in log if line.strip()]


def result(workdir: str) -> dict[str, Any] | None:
    """What rank 0 wrote at the end of the job (None: the job did not finish)."""
    path = os.path.join(workdir, "result.json")
    if not os.path.exists(path):
        return None
    with open(path) as out:
        loaded: dict[str, Any] = json.load(out)
        return loaded


def agent_log_tail(workdir: str, agent: int, lines: int = 15) -> str:
    """The last ``lines`` lines rendezvous agent ``agent`` wrote ("" if none)."""
    path = os.path.join(workdir, f"agent{agent}.log")
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as log:
        return "".join(log.readlines()[-lines:])


def log_tail(workdir: str, lines: int = 15) -> str:
    """The last ``lines`` lines the agents wrote, for a failure's detail."""
    tails = []
    for name in sorted(os.listdir(workdir)):
        if name.startswith("agent") and name.endswith(".log"):
            with open(os.path.join(workdir, name), errors="replace") as log:
                tails.append(f"{name}:\n" + "".join(log.readlines()[-lines:]))
    return "\n".join(tails)
