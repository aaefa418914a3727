"""Faults: a rank that dies at a drawn point leaves its survivors an error within the group's timeout,
never a hang; they can destroy the group and build a fresh one; and a checkpoint the dead rank left
half-written is never loaded as if complete.

Modules: ``cases`` (``FaultCase``, the ``fault_cases`` strategy, the time bounds), ``rank`` (what each
process of a fault world runs), ``launch`` (the driver side: the short-lived world, its deadline).

For any drawn :class:`~fuzzdist.properties.faults.cases.FaultCase` (2 or 3 ranks over gloo, a timeout of
1 to 3 s, the victim and how it dies: ``os._exit`` with a drawn code or SIGKILL), the victim dies at the
drawn point:

* before, during (its Work issued with ``async_op=True``, not waited) or after an ``all_reduce``,
  ``broadcast``, ``all_gather_into_tensor``, ``all_to_all_single`` or ``barrier``;
* inside DDP's backward (in the hook of a gradient that DDP has not yet marked ready);
* inside ``dcp.save`` (its storage writer's local plan, the start of its writes, once its files are on
  disk, or the coordinator's ``finish``, before the metadata).

What the docs promise.  ``init_process_group``'s ``timeout``: "Timeout for operations executed against
the process group ... the duration after which collectives will be aborted".  So each survivor's call
that involves the victim either returns what it documents (a broadcast from a live root may reach a
survivor before the victim died) or raises, within the timeout (plus
:data:`~fuzzdist.properties.faults.cases.GRACE_S` for the machine's load); by the next collective at the
latest every survivor has seen an error.  ``destroy_process_group``: "Destroy a given process group, and
deinitialize the distributed package", after which ``init_process_group`` on the survivors alone (a fresh
store, their ranks renumbered) must work: an ``all_reduce`` there gives the survivors' sum.  DCP's
``FileSystemWriter.finish`` writes the checkpoint's metadata after every rank's writes succeeded, and
``dcp.load`` reads through it; a checkpoint whose save did not finish must be refused by the load (it
raises) or, where every rank's save had returned, load every value as saved, bitwise: never a value
left at what the caller allocated.

Each example runs in a world of its own processes (``launch``), not on the shared rank pool, since it
kills one of its ranks on purpose; its cost is a process start per rank (measured in bench/RESULTS.md).

The implementations under test are keywords of :func:`check`: ``collective(name, tensor, root, group)``
(the survivors' collectives, default ``rank.run_collective``) and ``load(state_dict, checkpoint_id,
process_group)`` (default ``dcp.load``); both must be picklable (module-level functions).
"""

from __future__ import annotations

from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Problem, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties.faults.cases import FaultCase, fault_cases
from fuzzdist.properties.faults.launch import WorldOutcome, run_world
from fuzzdist.properties.faults.rank import Collective, Load, dcp_load, run_collective

__all__ = ["FaultCase", "check", "check_outcome", "fault_cases"]


def check_outcome(case: FaultCase, outcome: WorldOutcome) -> None:
    """Raise :class:`PropertyFailure` if a survivor or the driver saw a problem in ``outcome``."""
    wrong: dict[int, list[Problem]] = {}
    for problem in outcome.problems:
        wrong.setdefault(problem.rank if problem.rank is not None else -1, []).append(problem)
    for rank, problems in outcome.reports.items():
        if problems:
            wrong.setdefault(rank, []).extend(problems)
    if wrong:
        raise PropertyFailure(
            f"after rank {case.victim} died ({case.death}) at {case.point}, the survivors saw problems on ranks "
            f"{sorted(wrong)}:{by_rank(wrong)}",
            [outcome.reports.get(rank) for rank in range(case.world_size)],
            [p for rank in sorted(wrong) for p in wrong[rank]],
        )


def check(case: FaultCase, *, collective: Collective = run_collective, load: Load = dcp_load) -> None:
    """Run ``case`` in a world of its own processes; raise :class:`PropertyFailure` if a survivor got no
    error, got it too late, could not build a fresh group, or loaded a half-written checkpoint."""
    with known_failures("faults", case=case):
        check_outcome(case, run_world(case, collective, load))
