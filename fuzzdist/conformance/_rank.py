"""The conformance code that runs inside the rank processes.

Each rank builds the user's ProcessGroup once per factory (``group_for``),
caches it in a module-level dict for the life of the rank process, and runs
drawn ``OpCall``s on it: each op's definition (``OpInfo.prepare``) builds the
tensors and calls the ProcessGroup method the way torch.distributed's Python
API would; this module issues the calls and waits on their works (at once,
or in a drawn order after all were issued asynchronously).

Nothing here decides whether a result is right: the ranks return what they
observed (output tensors, and the few problems only a rank can see: bytes
written outside an output tensor, a modified input) and the driver compares
with its own reference.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend  # dist.Backend is the name enum

from fuzzdist.conformance.ops import OpCall
from fuzzdist.conformance.ops._buffers import Prepared
from fuzzdist.errors import FactoryError, InvalidType, describe_exit
from fuzzdist.problems import Kind, Problem, Symptom

# factory reference -> the ProcessGroup this rank built with it
_GROUPS: dict[str, Any] = {}
# factory reference -> the processes its factory started on this rank (torchft's ProcessGroupBaby runs
# its group in one): (multiprocessing.Process objects, other child pids)
_CHILDREN: dict[str, tuple[list[Any], list[int]]] = {}
# What a probe returns, instead of an exception's type name, for a call during which the group's own
# processes died (the message says which, and what the rank raised).
SUBJECT_DIED = "fuzzdist.subject-died"
PROBE_SKIPPED = "fuzzdist.probe-skipped"  # a probe not run, for that reason (see ``probe``)
_BUILDS: dict[str, int] = {}  # factory reference -> groups built with it (each gets fresh store keys)
_RETIRED: list[Any] = []  # groups dropped after the ranks fell out of step: kept, never destroyed mid-op
_FACTORIES: dict[str, Callable[..., Any]] = {}


# -- factories -----------------------------------------------------------------------


def resolve_factory(ref: str) -> Callable[..., Any]:
    """``"package.module:callable"`` (or ``"module:obj.attr"``) -> the callable."""
    factory = _FACTORIES.get(ref)
    if factory is not None:
        return factory
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise FactoryError(f"a ProcessGroup factory is given as 'module:callable', got {ref!r}")
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise FactoryError(f"a ProcessGroup factory is given as 'module:callable', got {ref!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise FactoryError(
            f"can't import module {module_name!r} of factory {ref!r}: {exc}. "
            "Is it on sys.path (run from its directory, or set PYTHONPATH)?"
        ) from exc
    except SyntaxError as exc:
        raise FactoryError(
            f"module {module_name!r} of factory {ref!r} does not compile: {exc.msg} "
            f"({exc.filename}, line {exc.lineno}); fix it and run again"
        ) from exc
    except Exception as exc:  # whatever its top level raised: the user's module, not fuzzdist, is broken
        raise FactoryError(
            f"module {module_name!r} of factory {ref!r} raised on import: "
            f"{type(exc).__name__}: {exc}; run `python -c 'import {module_name}'` to see where"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise FactoryError(f"module {module_name!r} has no attribute {attr!r} (factory {ref!r})") from exc
    if not callable(obj):
        raise FactoryError(
            f"factory {ref!r} is a {type(obj).__name__}, not a callable "
            "(rank, world_size, store, device) -> ProcessGroup"
        )
    _FACTORIES[ref] = obj
    return obj


def factory_ref(factory: str | Callable[..., Any]) -> str:
    """The 'module:qualname' string the ranks import ``factory`` by (checked to resolve back to it)."""
    if isinstance(factory, str):
        resolve_factory(factory)
        return factory
    if not callable(factory):
        raise FactoryError(f"factory must be 'module:callable' or a callable, got {factory!r}")
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        raise FactoryError(
            f"factory {factory!r} can't be imported by the rank processes: pass a top-level function "
            "of an importable module (not a lambda, a nested function or one defined in __main__), "
            "or its 'module:callable' name"
        )
    ref = f"{module}:{qualname}"
    if resolve_factory(ref) is not factory:
        raise FactoryError(f"factory {factory!r} does not resolve back from {ref!r}")
    return ref


def as_process_group(obj: Any, store: Any, rank: int, world_size: int, device: torch.device) -> Any:
    """The factory's result as a ``dist.ProcessGroup``.

    A ``dist.Backend`` (``ProcessGroupGloo(store, rank, size)``, a custom C++
    or Python backend) is wrapped the way ``init_process_group`` wraps one: a
    ``ProcessGroup`` with the backend registered for the device, so calls go
    through c10d's dispatcher to it.
    """
    if isinstance(obj, dist.ProcessGroup):
        return obj
    if isinstance(obj, _C10dBackend):
        types = dist.ProcessGroup.BackendType
        if isinstance(obj, getattr(dist, "ProcessGroupGloo", ())):
            backend_type = types.GLOO
        elif dist.is_nccl_available() and isinstance(obj, getattr(dist, "ProcessGroupNCCL", ())):
            backend_type = types.NCCL
        else:
            backend_type = types.CUSTOM
        pg = dist.ProcessGroup(store, rank, world_size)
        pg._set_default_backend(backend_type)
        pg._register_backend(torch.device(device.type), backend_type, obj)
        return pg
    raise InvalidType(
        f"the factory returned {type(obj).__qualname__}, not a torch.distributed ProcessGroup (or Backend)"
    )


def group_for(ctx: Any, ref: str) -> Any:
    """This rank's ProcessGroup from factory ``ref``, built on first use and cached.

    The factory gets ``(rank, world_size, store, device)``; ``store`` is a
    ``PrefixStore`` private to this factory over the pool's store.
    """
    pg = _GROUPS.get(ref)
    if pg is None:
        factory = resolve_factory(ref)
        n = _BUILDS[ref] = _BUILDS.get(ref, 0) + 1
        store = dist.PrefixStore(f"fuzzdist/pg/{ref}/{n}/", ctx.store)
        before_mp = {p.pid for p in multiprocessing.active_children()}
        before = _child_pids()
        obj = factory(ctx.rank, ctx.world_size, store, ctx.device)
        pg = as_process_group(obj, store, ctx.rank, ctx.world_size, ctx.device)
        started = [p for p in multiprocessing.active_children() if p.pid not in before_mp]
        mp_pids = {p.pid for p in started}
        _CHILDREN[ref] = (started, sorted(_child_pids() - before - mp_pids))
        _GROUPS[ref] = pg
    return pg


def _child_pids() -> set[int]:
    """This process's children, from /proc (Linux; empty elsewhere)."""
    pids: set[int] = set()
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
    except OSError:
        pass
    return pids


def _gone(pid: int) -> str | None:
    """How the child ``pid`` (not started with multiprocessing) ended, or None while it runs."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return "it is gone"
    return "it exited (a zombie, not yet reaped)" if state in ("Z", "X") else None


def dead_children(ctx: Any, ref: str, wait: float = 0.0) -> list[str]:
    """The processes the factory ``ref`` started on this rank that have ended, one line each (the
    evidence that the group under test died, rather than refused or failed a call).  ``wait``: give
    them that long to finish exiting (a closed pipe is seen a moment before its process has exited)."""
    started, others = _CHILDREN.get(ref, ([], []))
    until = time.monotonic() + wait
    if wait and started:
        alive = [p for p in started if p.exitcode is None]
        while alive and time.monotonic() < until:
            alive[0].join(timeout=min(0.1, max(0.0, until - time.monotonic())))
            alive = [p for p in alive if p.exitcode is None]
    lines = []
    for p in started:
        code = p.exitcode  # polls
        if code is not None:
            lines.append(f"its process {p.name} (pid {p.pid}) exited: {describe_exit(code)}")
    for pid in others:
        how = _gone(pid)
        while how is None and time.monotonic() < until:
            time.sleep(0.1)
            how = _gone(pid)
        if how is not None:
            lines.append(f"its process pid {pid}: {how}")
    return lines


# What a rank raises when the other end of a pipe or socket to the group's own process is gone.
_DISCONNECTS = {
    f"builtins.{name}"
    for name in (
        "BrokenPipeError",
        "EOFError",
        "ConnectionResetError",
        "ConnectionAbortedError",
        "ConnectionRefusedError",
    )
}
DISCONNECT_WAIT_S = 5.0  # how long a process whose pipe closed is given to finish exiting


def cached_group(ref: str) -> Any:
    """The group already built from ``ref`` on this rank (see ``group_for``)."""
    return _GROUPS[ref]


def build(ctx: Any, ref: str) -> dict[str, Any]:
    """Build (or reuse) the group; what it says about itself."""
    pg = group_for(ctx, ref)
    name = None
    for attr in ("name", "getBackendName"):
        try:
            name = str(getattr(pg, attr)())
            break
        except Exception:  # noqa: BLE001 - a Python group may not implement it
            continue
    return {
        "rank": int(pg.rank()),
        "size": int(pg.size()),
        "name": name,
        "type": f"{type(pg).__module__}.{type(pg).__qualname__}",
    }


def forget(ctx: Any, ref: str) -> None:
    """Drop this rank's cached group; the next call builds a new one.

    After an example failed on some ranks only, the group's ranks may be out
    of step (one consumed a collective's sequence number, another did not),
    and every later example on it could hang or mix up data.
    """
    pg = _GROUPS.pop(ref, None)
    _CHILDREN.pop(ref, None)
    if pg is not None:
        _RETIRED.append(pg)


# -- rank functions (run through RankPool.run) ----------------------------------------


class _Abandoned(Exception):
    """Another rank raised while issuing: this rank drops its works instead of waiting on them."""


class _IssueError(Exception):
    """Carries an exception raised while issuing (already handled: no need to drop the group)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


# A wait() on a Work already waited on must return at once; it is given this long (generous) before
# the rank says it blocked, so a backend whose repeated wait blocks until its timeout costs seconds,
# not the example's timeout and a pool restart (gloo's send/recv Work: gloo-p2p-second-wait-blocks).
REPEAT_WAIT_S = 2.0


class _RepeatedWaitBlocked(Exception):
    """A repeated wait() timed out, or returned False, within REPEAT_WAIT_S: ``problem`` says which call (a
    :attr:`~fuzzdist.problems.Symptom.REPEAT_WAIT_BLOCKED` record), and so does the message."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problem,))


_TIMEOUT_WORDS = re.compile(r"timed? ?out|timeout", re.I)


def _is_timeout(exc: BaseException) -> bool:
    """Whether a wait() raised because its timeout ran out (by type, else by message: backends raise
    RuntimeError or DistBackendError with "Timed out ..." for it)."""
    return isinstance(exc, TimeoutError) or bool(_TIMEOUT_WORDS.search(f"{type(exc).__name__}: {exc}"))


def _wait_again(work: Any, index: int, call: OpCall) -> None:
    """Wait on ``work`` again, bounded by REPEAT_WAIT_S (Works whose wait() takes no timeout: bounded by
    the example's timeout).  Only a timeout or a False return is "blocked"; any other exception is the
    rank's error, as it is from a first wait()."""

    def blocked(what: str) -> _RepeatedWaitBlocked:
        return _RepeatedWaitBlocked(
            Problem(
                Kind.HANG,
                call=index,
                op=call.op,
                symptom=Symptom.REPEAT_WAIT_BLOCKED,
                detail=f"within {REPEAT_WAIT_S:g} s: {what}",
            )
        )

    try:
        done = work.wait(timedelta(seconds=REPEAT_WAIT_S))
    except TypeError:  # a Python Work whose wait() takes no timeout
        work.wait()
        return
    except Exception as exc:
        # c10d's FutureWrappingWork (the Work a Python group's futures become) refuses any finite
        # timeout; its wait() is then bounded by the example's timeout, as every other call is
        if isinstance(exc, RuntimeError) and "finite timeout not implemented" in str(exc):
            work.wait()
            return
        if _is_timeout(exc):
            raise blocked(f"{type(exc).__name__}: {exc}") from exc
        raise
    if done is False:
        raise blocked("wait() returned False")


def _agree(ctx: Any, failed: bool) -> int:
    """How many ranks failed, agreed over the pool's own group (not the one under test)."""
    if ctx.world_size == 1:
        return int(failed)
    count = torch.tensor([int(failed)], dtype=torch.int64)
    dist.all_reduce(count, group=ctx.group)
    return int(count)


def _issue(ctx: Any, ref: str, prepared: list[Prepared], async_op: bool) -> list[Any]:
    """Issue the calls; if any rank raised doing so, every rank drops the group and stops.

    A backend that refuses a call on some ranks only (a root that rejects a
    layout, a sender that rejects a dtype) would leave the other ranks waiting
    forever; after this check they give up at once, and the group, whose
    ranks may now be out of step, is rebuilt for the next example.
    """
    works: list[Any] = []
    error: BaseException | None = None
    for p in prepared:
        try:
            works.append(p.issue(async_op))
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the other ranks know
            error = exc
            break
    failed = _agree(ctx, error is not None)
    if failed:
        if failed < ctx.world_size:  # only some ranks issued it: the group's ranks are out of step
            forget(ctx, ref)
        if error is not None:
            raise _IssueError(error)
        raise _Abandoned()
    return works


def run_calls(
    ctx: Any,
    ref: str,
    calls: tuple[OpCall, ...],
    wait_order: tuple[int, ...] | None = None,
) -> list[dict[str, Any]] | None:
    """Run ``calls`` on the factory's group; what each produced on this rank.

    ``wait_order=None``: each call is issued and waited on before the next
    (torch.distributed's ``async_op=False``).  Otherwise every call is issued
    with ``async_op=True`` first, then their works are waited on in
    ``wait_order`` (indices, repeats allowed), and only then read.

    Returns None on a rank that gave up because another rank raised while
    issuing (that rank's exception is the example's failure).
    """
    try:
        return _run_calls(ctx, ref, calls, wait_order)
    except _Abandoned:
        return None


def _run_calls(
    ctx: Any, ref: str, calls: tuple[OpCall, ...], wait_order: tuple[int, ...] | None, forget_on_error: bool = True
) -> list[dict[str, Any]]:
    pg = group_for(ctx, ref)
    prepared = [call.info.prepare(ctx, pg, call, i) for i, call in enumerate(calls)]
    try:
        if wait_order is None:
            for p in prepared:
                work = _issue(ctx, ref, [p], False)[0]
                if work is not None:  # as torch.distributed: a backend may return no Work
                    work.wait()
        else:
            works = _issue(ctx, ref, prepared, True)
            waited: set[int] = set()
            for i in wait_order:
                if works[i] is None:
                    continue
                if i in waited:
                    _wait_again(works[i], i, calls[i])
                else:
                    works[i].wait()
                    waited.add(i)
    except _Abandoned:
        raise
    except _IssueError as exc:
        raise exc.error from None
    except Exception:
        if forget_on_error:
            forget(ctx, ref)  # raised while waiting: the other ranks may be out of step with this one
        raise
    return [p.observe() for p in prepared]


def probe(
    ctx: Any, ref: str, calls: tuple[OpCall, ...], by_dtype: bool = False, killed_by: tuple[str, ...] = ()
) -> list[tuple[str, str] | None]:
    """Run each call once; per call None (it ran here) or (exception type, message).

    A call during which the group's own processes died is ``(SUBJECT_DIED, what the rank raised and
    how they ended)``, and the next call gets a new group.  Where a call finds them gone right after
    the previous call that ran raised, either may have killed them (a refusal, say, that ended the
    process; or this call, on a process that outlived a plain refusal): this call is run again on a
    new group, and decides.  If it kills that one too, the crash is its own and the previous call's
    error stands; if not, the previous call is the one that killed them, and is marked so.  Once a
    call killed them, the calls like it are not run (``PROBE_SKIPPED``): each crash costs a new
    group.  Like it: of the same operation, or with ``by_dtype`` (the dtype probes: a group that
    ends its process on a dtype it refuses does so in every operation) of the same dtype, or of a
    dtype in ``killed_by`` (those that killed it at another world size)."""
    results: list[tuple[str, str] | None] = []
    crashed: set[str] = set(killed_by)  # what killed the group's processes: ops, or dtype names
    retried = False  # the call now run is run again, on a new group, to tell whose the last crash was
    suspect: tuple[str, str] | None = None  # then: the previous call, as blamed if this run survives
    last_ran: int | None = None  # the index in ``results`` of the last call that ran (was not skipped)
    i = 0

    def key(call: OpCall) -> str:
        return str(call.spec.dtype) if by_dtype and call.info.needs_dtypes else call.op

    while i < len(calls):
        call = calls[i]
        if key(call) in crashed:
            results.append((PROBE_SKIPPED, f"not probed: a probe like it ({key(call)}) crashed the group"))
            i += 1
            continue
        result = _probe_one(ctx, ref, call)
        died: list[str] = []
        if result is not None:
            disconnected = result[0] in _DISCONNECTS
            died = dead_children(ctx, ref, wait=DISCONNECT_WAIT_S if disconnected else 0.0)
        if retried:
            # this call again, on a new group: if no rank's group died this time, the previous call
            # killed the first one (it ran on every rank, so every rank agrees on the verdict)
            if not _agree(ctx, bool(died)) and last_ran is not None:
                if suspect is not None:
                    results[last_ran] = suspect
                crashed.add(key(calls[last_ran]))
            retried, suspect = False, None
        elif died:
            previous = results[last_ran] if last_ran is not None else None
            if previous is not None and previous[0] not in (SUBJECT_DIED, PROBE_SKIPPED):
                suspect = (
                    SUBJECT_DIED,
                    f"{previous[0]}: {previous[1]}; then "
                    + "; ".join(died)
                    + f" (the next call got {result[0] if result is not None else ''})",
                )
        if not retried and _agree(ctx, suspect is not None):
            # the previous call raised and this one found the group dead: run this one again to tell
            forget(ctx, ref)
            retried = True
            continue
        if died and result is not None:
            result = (SUBJECT_DIED, f"{result[0]}: {result[1]}; " + "; ".join(died))
        last_ran = len(results)
        results.append(result)
        failed = _agree(ctx, result is not None)
        died_here = _agree(ctx, result is not None and result[0] == SUBJECT_DIED)
        if died_here:
            crashed.add(key(call))
        if 0 < failed < ctx.world_size or died_here:
            # some ranks raised, others did not, or the group died: the next call gets a new group
            forget(ctx, ref)
        i += 1
    return results


def _probe_one(ctx: Any, ref: str, call: OpCall) -> tuple[str, str] | None:
    try:
        _run_calls(ctx, ref, (call,), None, forget_on_error=False)
    except _Abandoned:
        return None
    except Exception as exc:  # noqa: BLE001 - the driver classifies it
        return f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc)
    return None


class _GroupContext:
    """A RankContext stand-in whose ``group`` is the factory's group (for the DDP property)."""

    def __init__(self, ctx: Any, group: Any) -> None:
        self.rank, self.world_size, self.device = ctx.rank, ctx.world_size, ctx.device
        self.backend, self.seed, self.tmpdir = ctx.backend, ctx.seed, ctx.tmpdir
        self.group = group
        self._ctx = ctx

    @property
    def store(self) -> Any:
        return self._ctx.store


def ddp_parity(ctx: Any, ref: str, config: Any, dtype: torch.dtype, seed: int, pg_kind: str, schedule: Any) -> Any:
    """The DDP parity property's rank function, with the factory's group as the process group."""
    from fuzzdist.properties import ddp

    pg = group_for(ctx, ref)
    kwargs = ddp.pg_wrapper(pg_kind, schedule) if pg_kind != "direct" else {}
    group_ctx: Any = _GroupContext(ctx, pg)  # stands in for the RankContext, with the factory's group
    return ddp.ddp_parity(group_ctx, config, dtype, seed, **kwargs)


__all__ = [
    "FactoryError",
    "as_process_group",
    "build",
    "cached_group",
    "ddp_parity",
    "factory_ref",
    "forget",
    "group_for",
    "probe",
    "resolve_factory",
    "run_calls",
]
