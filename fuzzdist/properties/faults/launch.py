"""The driver side of one fault example: start a short-lived world of processes for it, collect what
the survivors report, and bound every wait.

A fault example kills one of its own ranks on purpose, so it does not run on the shared rank pool (whose
ranks a death would cost a restart, and whose controller reads any death as a failure).  Each example
gets its own world instead: ``world_size`` processes started the way the pool starts its ranks (forked
from the fork server that imported torch once, where that is safe), a FileStore in a fresh folder, and a
deadline after which whatever is still running is killed and reported as stuck in the phase it last
announced.
"""

from __future__ import annotations

import multiprocessing.connection
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from fuzzdist.pool import process_cover, starting
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.faults.cases import FaultCase, world_deadline_s
from fuzzdist.properties.faults.rank import Collective, Load, rank_main


@dataclass
class WorldOutcome:
    """What one fault world did: each survivor's problems (None: it never reported), each rank's last
    announced phase and exit code, and the problems the driver saw itself."""

    reports: dict[int, list[Problem] | None] = field(default_factory=dict)
    phases: dict[int, str] = field(default_factory=dict)
    exit_codes: dict[int, int | None] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def expected_exit_code(case: FaultCase) -> int:
    """The victim's exit code as ``multiprocessing`` reports it: its ``_exit`` code, or minus SIGKILL."""
    return -int(signal.SIGKILL) if case.death == "sigkill" else case.exit_code


def run_world(case: FaultCase, collective: Collective, load: Load) -> WorldOutcome:
    """Run ``case`` in a world of its own and return what happened; never waits past
    :func:`world_deadline_s`.  Under ``--cover`` its ranks' lines count too."""
    with process_cover.gathering() as cover:
        return _run_world(case, collective, load, cover)


def _run_world(case: FaultCase, collective: Collective, load: Load, cover: dict[str, str]) -> WorldOutcome:
    """:func:`run_world` with ``cover``, the environment that asks the ranks to record their lines."""
    ctx = starting.context(starting.resolve_start_method("auto", "cpu"))
    workdir = tempfile.mkdtemp(prefix="fuzzdist-faults-")
    outcome = WorldOutcome()
    procs: dict[int, Any] = {}
    conns: dict[Any, int] = {}
    try:
        for rank in range(case.world_size):
            theirs_read, theirs_write = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=rank_main,
                args=(case, rank, workdir, theirs_write, collective, load, cover),
                name=f"fuzzdist-fault-rank{rank}",
                daemon=True,
            )
            proc.start()
            theirs_write.close()
            procs[rank], conns[theirs_read] = proc, rank
        _collect(case, conns, outcome, time.monotonic() + world_deadline_s(case))
    finally:
        for proc in procs.values():
            if proc.is_alive():
                proc.kill()
        for rank, proc in procs.items():
            proc.join(10)
            outcome.exit_codes[rank] = proc.exitcode
        shutil.rmtree(workdir, ignore_errors=True)
    _check_exits(case, outcome)
    return outcome


def _collect(case: FaultCase, conns: dict[Any, int], outcome: WorldOutcome, deadline: float) -> None:
    """Read every rank's messages until each has reported or closed its end, or ``deadline`` passes."""
    pending = dict(conns)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready: list[Any] = multiprocessing.connection.wait(list(pending), timeout=left)
        for conn in ready:
            rank = pending[conn]
            try:
                message: tuple[str, Any] = conn.recv()
            except (EOFError, OSError):
                del pending[conn]
                continue
            if message[0] == "phase":
                outcome.phases[rank] = message[1]
            else:
                outcome.reports[rank] = message[1]
                del pending[conn]
    for rank in sorted(pending.values()):
        if rank != case.victim:
            where = outcome.phases.get(rank, "starting")
            outcome.problems.append(
                Problem(
                    Kind.HANG,
                    f"a survivor still in {where} after {world_deadline_s(case):.0f} s",
                    rank=rank,
                    hint="a survivor must get an error within the group's timeout, not wait forever",
                )
            )


def _check_exits(case: FaultCase, outcome: WorldOutcome) -> None:
    """The victim must have died as drawn and every other rank reported: else the example did not run
    as drawn (a survivor that crashed on its own is a problem too)."""
    for rank in range(case.world_size):
        code = outcome.exit_codes.get(rank)
        if rank == case.victim:
            if code != expected_exit_code(case):
                outcome.problems.append(
                    Problem(
                        Kind.NOTE,
                        f"the victim exited with {code}, not {expected_exit_code(case)}: it never reached "
                        f"its point ({outcome.phases.get(rank, 'starting')})",
                        rank=rank,
                    )
                )
        elif rank not in outcome.reports and not any(p.rank == rank for p in outcome.problems):
            outcome.problems.append(
                Problem(
                    Kind.RAISED,
                    f"a survivor died (exit code {code}) in {outcome.phases.get(rank, 'starting')}",
                    rank=rank,
                    hint="a survivor must get an error it can handle, not die with its peer",
                )
            )
