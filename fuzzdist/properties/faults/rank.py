"""The rank side of one fault example: what each process of the short-lived world runs.

Every rank joins a gloo group over a FileStore, meets the others at a barrier, then runs the drawn step;
the victim dies at the drawn point instead.  A survivor records what each call did (returned, with its
values, or raised, and after how long), destroys the group, joins a fresh one with the other survivors
and checks an ``all_reduce`` there; after a DCP save it also tries to load the checkpoint.  It reports
``("phase", name)`` before each phase and ``("report", problems)`` at the end over ``conn``, so that the
driver can say where a rank that never reports is stuck.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from fuzzdist.pool import process_cover
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.faults.cases import FRESH_TIMEOUT_S, GRACE_S, FaultCase, world_deadline_s
from fuzzdist.toolkit.checks import first_difference

STOPS = (KeyboardInterrupt, SystemExit)
"""What a survivor never takes for its call's error; anything else it is (DCP's ``CheckpointException``
is a ``BaseException``)."""

Collective = Callable[[str, torch.Tensor, int, Any], "torch.Tensor | None"]
Load = Callable[[dict[str, torch.Tensor], str, Any], None]


def rank_values(rank: int, numel: int) -> torch.Tensor:
    """Rank ``rank``'s input: distinct non-zero small integers in float32, so that every sum is exact and
    none equals a rank's own input."""
    return torch.arange(1, numel + 1, dtype=torch.float32) + 1000.0 * rank


def collective_input(name: str, rank: int, world_size: int, numel: int) -> torch.Tensor:
    """What rank ``rank`` passes to collective ``name`` (all_to_all: one piece of ``numel`` per peer)."""
    return rank_values(rank, numel * world_size if name == "all_to_all" else numel)


def expected_output(name: str, rank: int, world_size: int, numel: int, root: int) -> torch.Tensor | None:
    """What collective ``name`` leaves on rank ``rank`` when every rank took part (None: a barrier)."""
    if name == "all_reduce":
        return sum((rank_values(r, numel) for r in range(world_size)), torch.zeros(numel))
    if name == "broadcast":
        return rank_values(root, numel)
    if name == "all_gather":
        return torch.cat([rank_values(r, numel) for r in range(world_size)])
    if name == "all_to_all":
        pieces = [collective_input(name, r, world_size, numel).chunk(world_size)[rank] for r in range(world_size)]
        return torch.cat(pieces)
    return None


def _call(name: str, tensor: torch.Tensor, root: int, group: Any, *, async_op: bool) -> tuple[Any, Any]:
    """Issue collective ``name`` over ``group``: ``(output, work)`` (work None unless ``async_op``)."""
    if name == "all_reduce":
        out = tensor.clone()
        return out, dist.all_reduce(out, group=group, async_op=async_op)
    if name == "broadcast":
        out = tensor.clone()
        return out, dist.broadcast(out, src=root, group=group, async_op=async_op)
    if name == "all_gather":
        out = torch.empty(tensor.numel() * dist.get_world_size(group), dtype=tensor.dtype)
        return out, dist.all_gather_into_tensor(out, tensor, group=group, async_op=async_op)
    if name == "all_to_all":
        out = torch.empty_like(tensor)
        return out, dist.all_to_all_single(out, tensor, group=group, async_op=async_op)
    return None, dist.barrier(group=group, async_op=async_op)


def run_collective(name: str, tensor: torch.Tensor, root: int, group: Any) -> torch.Tensor | None:
    """The collective under test, as survivors call it: ``name`` over ``group``, waited; its output."""
    return _call(name, tensor, root, group, async_op=False)[0]


def dcp_load(state_dict: dict[str, torch.Tensor], checkpoint_id: str, process_group: Any) -> None:
    """The checkpoint loader under test: ``dcp.load`` in place."""
    import torch.distributed.checkpoint as dcp

    dcp.load(state_dict, checkpoint_id=checkpoint_id, process_group=process_group)


def die(case: FaultCase) -> None:
    """End this process at once as ``case`` says: no clean-up, no flushing, no goodbye to the peers (only
    ``--cover``'s lines so far are written, to a local file, when it records)."""
    process_cover.flush()
    if case.death == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(case.exit_code)


def checkpoint_state(case: FaultCase, rank: int) -> dict[str, torch.Tensor]:
    """What rank ``rank`` saves: ``shared`` (alike on every rank) and ``rank<r>``, its own entry."""
    return {"shared": rank_values(7, 64), f"rank{rank}": rank_values(rank, 16 + rank)}


def _dying_writer(case: FaultCase, path: str) -> Any:
    """A ``FileSystemWriter`` that kills the victim at ``case.dcp_stage`` of the save."""
    from torch.distributed.checkpoint import FileSystemWriter

    stage = case.dcp_stage

    class DyingWriter(FileSystemWriter):
        """``FileSystemWriter``, but the process dies at the drawn stage."""

        def prepare_local_plan(self, plan: Any) -> Any:
            if stage == "plan":
                die(case)
            return super().prepare_local_plan(plan)

        def write_data(self, plan: Any, planner: Any) -> Any:
            if stage == "write":
                die(case)
            written = super().write_data(plan, planner)
            if stage == "written":
                written.wait()
                die(case)
            return written

        def finish(self, metadata: Any, results: Any) -> None:
            if stage == "finish":
                die(case)
            super().finish(metadata, results)

    return DyingWriter(path)


class Survivor:
    """What one surviving rank saw: its problems, each call timed against the group's timeout."""

    def __init__(self, case: FaultCase, rank: int) -> None:
        self.case = case
        self.rank = rank
        self.problems: list[Problem] = []
        self.raised = False

    def timed(self, what: str, call: Callable[[], Any]) -> tuple[bool, Any]:
        """Run ``call``: ``(True, result)`` if it returned, ``(False, None)`` if it raised, which is what a
        survivor must see, within the group's timeout (plus :data:`GRACE_S`)."""
        start = time.monotonic()
        try:
            return True, call()
        except BaseException as exc:
            if isinstance(exc, STOPS):
                raise
            took = time.monotonic() - start
            self.raised = True
            bound = self.case.timeout_s + GRACE_S
            if took > bound:
                self.problems.append(
                    Problem(
                        Kind.HANG,
                        f"{what}: the error came after {took:.1f} s",
                        rank=self.rank,
                        got=round(took, 1),
                        bound=bound,
                        hint="torch documents the group's timeout as the bound on an operation",
                        error=type(exc).__name__,
                    )
                )
            return False, None

    def must_have_raised(self, what: str) -> None:
        """A problem if no call of this survivor has raised by now, though its peer is dead."""
        if not self.raised:
            self.problems.append(
                Problem(
                    Kind.MISSING,
                    f"{what}: no error on a survivor after rank {self.case.victim} died",
                    rank=self.rank,
                    hint="the survivor went on as if the group were whole",
                )
            )


def _collective_step(case: FaultCase, rank: int, survivor: Survivor | None, group: Any, collective: Collective) -> None:
    """The victim dies before, during or after the collective; a survivor checks what the call gave."""
    tensor = collective_input(case.collective, rank, case.world_size, case.numel)
    if survivor is None:
        if case.point == "before":
            die(case)
        _, work = _call(case.collective, tensor, case.root, group, async_op=True)
        if case.point == "after":
            work.wait()
        die(case)
        return
    returned, out = survivor.timed(case.collective, lambda: collective(case.collective, tensor, case.root, group))
    expected = expected_output(case.collective, rank, case.world_size, case.numel, case.root)
    if returned and expected is not None:
        what = f"{case.collective}'s output, returned without an error"
        wrong = Problem(Kind.MISSING, what) if out is None else first_difference(out, expected, what)
        if wrong is not None:
            survivor.problems.append(replace(wrong, rank=rank))
    if not survivor.raised:
        # The victim is dead by now (or its Work in flight): the next collective cannot complete.
        probe = rank_values(rank, 1)
        survivor.timed("the next all_reduce", lambda: collective("all_reduce", probe, 0, group))
    survivor.must_have_raised(case.collective)


def _ddp_step(case: FaultCase, rank: int, survivor: Survivor | None, group: Any) -> Callable[[], None]:
    """DDP over the fault group, built now; the step: a backward, in which the victim dies in the hook of
    the first layer's weight gradient, which autograd computes last, before DDP marks it ready: its
    bucket is never reduced."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)  # every rank builds the same model: no need for DDP's sync at construction
    # ``init_sync=False``: the constructor does not talk over the fault group, whose short timeout a
    # rank descheduled on a loaded machine would otherwise run into before anyone died.
    model = DDP(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), process_group=group, init_sync=False)
    batch = torch.full((3, 4), float(rank + 1))
    if survivor is None:
        model.module[0].weight.register_hook(lambda grad: die(case))
        return lambda: model(batch).sum().backward()

    def backward() -> None:
        survivor.timed("DDP backward", lambda: model(batch).sum().backward())
        survivor.must_have_raised("DDP backward")

    return backward


def _dcp_step(
    case: FaultCase, rank: int, survivor: Survivor | None, group: Any, checkpoint_dir: str
) -> Callable[[], None]:
    """The step: every rank saves with ``dcp.save`` over the fault group; the victim's writer dies at the
    drawn stage."""
    import torch.distributed.checkpoint as dcp

    state = checkpoint_state(case, rank)
    if survivor is None:

        def save_and_die() -> None:
            dcp.save(state, storage_writer=_dying_writer(case, checkpoint_dir), process_group=group)
            die(case)  # a victim other than the coordinator outlives a "finish" stage: it dies now

        return save_and_die

    def save() -> None:
        survivor.timed("dcp.save", lambda: dcp.save(state, checkpoint_id=checkpoint_dir, process_group=group))
        if not survivor.raised:
            probe = rank_values(rank, 1)
            survivor.timed("the next all_reduce", lambda: dist.all_reduce(probe, group=group))
        survivor.must_have_raised("dcp.save")

    return save


def _step(
    case: FaultCase, rank: int, survivor: Survivor | None, group: Any, checkpoint_dir: str, collective: Collective
) -> Callable[[], None]:
    """The drawn step, set up (imports, models) but not run: the victim dies in it."""
    if case.point == "ddp_backward":
        return _ddp_step(case, rank, survivor, group)
    if case.point == "dcp_save":
        return _dcp_step(case, rank, survivor, group, checkpoint_dir)
    return lambda: _collective_step(case, rank, survivor, group, collective)


def saved_completely(case: FaultCase) -> bool:
    """Whether every rank's ``dcp.save`` returned before the victim died: only a victim other than the
    coordinator at the ``finish`` stage, which it never calls."""
    return case.point == "dcp_save" and case.dcp_stage == "finish" and case.victim != 0


def _check_load(case: FaultCase, rank: int, group: Any, checkpoint_dir: str, load: Load) -> list[Problem]:
    """Load the checkpoint into decoys on the fresh group: refused (raised), or every value as saved."""
    expected: dict[str, torch.Tensor] = {}
    for r in range(case.world_size):
        expected.update(checkpoint_state(case, r))
    state = {key: torch.full_like(value, -1.0) for key, value in expected.items()}
    try:
        load(state, checkpoint_dir, group)
    except BaseException as exc:
        if isinstance(exc, STOPS):
            raise
        return []  # refused: what a half-written checkpoint must get
    complete = "a complete checkpoint" if saved_completely(case) else "a checkpoint half-written by a dead rank"
    problems = []
    for key, value in expected.items():
        wrong = first_difference(state[key], value, f"{key}, loaded without an error from {complete}")
        if wrong is not None:
            hint = "a load must refuse a checkpoint whose save did not finish, or give back what was saved"
            problems.append(replace(wrong, rank=rank, hint=hint))
    return problems


def rank_main(
    case: FaultCase,
    rank: int,
    workdir: str,
    conn: Any,
    collective: Collective = run_collective,
    load: Load = dcp_load,
    cover: dict[str, str] | None = None,
) -> None:
    """The entry point of rank ``rank`` of the fault world in ``workdir``; reports over ``conn``.  ``cover``:
    the environment :func:`fuzzdist.pool.process_cover.gathering` gives under ``--cover`` (a forked rank
    inherits the fork server's environment, not the driver's)."""
    if cover:
        os.environ.update(cover)
        process_cover.record_this_process()
    signal.alarm(int(world_deadline_s(case)) + 10)  # a backstop: never outlive the driver's patience
    # torch's own logging of the failures it meets goes to a file: the driver's output stays the report's.
    log = os.open(os.path.join(workdir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        problems = _run(case, rank, workdir, lambda name: conn.send(("phase", name)), collective, load)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, the driver hears of it
        problems = [Problem.raised(exc, "the survivor's own code, outside the calls under test", rank=rank)]
    process_cover.flush()  # --cover: the lines, before an end that skips the exit handlers
    conn.send(("report", problems))
    conn.close()
    os._exit(0)  # no atexit work: the group is gone, the report sent


def _run(
    case: FaultCase, rank: int, workdir: str, phase: Callable[[str], None], collective: Collective, load: Load
) -> list[Problem]:
    """Run the example on rank ``rank``: the victim never returns; a survivor returns its problems."""
    phase("init_process_group")
    # The setup runs on a group with a generous timeout: on a loaded machine the ranks may reach it
    # seconds apart, which must not pass for the fault.  The drawn timeout is the fault group's.
    store = dist.FileStore(os.path.join(workdir, "store"), case.world_size)
    setup_timeout = timedelta(seconds=FRESH_TIMEOUT_S)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=case.world_size, timeout=setup_timeout)
    group = dist.new_group(timeout=timedelta(seconds=case.timeout_s))
    survivor = None if rank == case.victim else Survivor(case, rank)
    checkpoint_dir = os.path.join(workdir, "checkpoint")
    step = _step(case, rank, survivor, group, checkpoint_dir, collective)
    dist.barrier()  # every rank is alive, set up and connected before anyone dies
    phase(case.point)
    step()
    assert survivor is not None  # the victim died in its step
    phase("destroy_process_group")
    try:
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - documented to work: any error is the problem
        survivor.problems.append(Problem.raised(exc, "destroy_process_group after the death", rank=rank))
    if dist.is_initialized():
        survivor.problems.append(Problem(Kind.RAISED, "destroy_process_group left the group initialized", rank=rank))
    phase("a fresh group")
    survivor.problems.extend(_fresh_group(case, rank, workdir, checkpoint_dir, load))
    return survivor.problems


def _fresh_group(case: FaultCase, rank: int, workdir: str, checkpoint_dir: str, load: Load) -> list[Problem]:
    """Join a fresh group of the survivors (their index its rank): an ``all_reduce`` must be right there,
    and after a DCP save the checkpoint must load completely or not at all."""
    survivors = case.survivors
    new_rank = survivors.index(rank)
    store = dist.FileStore(os.path.join(workdir, "fresh_store"), len(survivors))
    try:
        dist.init_process_group(
            "gloo", store=store, rank=new_rank, world_size=len(survivors), timeout=timedelta(seconds=FRESH_TIMEOUT_S)
        )
        total = rank_values(rank, 8)
        dist.all_reduce(total)
    except Exception as exc:  # noqa: BLE001 - whatever it raised, the fresh group did not work
        return [Problem.raised(exc, "the survivors' fresh group", rank=rank)]
    problems = []
    expected = sum((rank_values(r, 8) for r in survivors), torch.zeros(8))
    wrong = first_difference(total, expected, "all_reduce on the survivors' fresh group")
    if wrong is not None:
        problems.append(replace(wrong, rank=rank))
    if case.point == "dcp_save":
        problems.extend(_check_load(case, rank, dist.group.WORLD, checkpoint_dir, load))
    dist.destroy_process_group()
    return problems
