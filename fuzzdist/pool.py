"""The rank pool: a persistent set of rank processes that run each example together.

This is the controller side.  It owns the processes, sends every rank the
same call, waits for all of them with a deadline, and turns what comes back
into return values or a :class:`~fuzzdist.errors.RankFailure`.  The code that
runs inside a rank lives in ``_worker.py``.

Every wait here is bounded: a rank that hangs is a ``RankTimeout``, a rank
that dies is a ``RankCrash``, and either way the pool kills every rank and
starts fresh ones before the next example.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import pickle
import select
import shutil
import signal
import sys
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fuzzdist import _coverage, _remote, _worker
from fuzzdist.capabilities import validate_pool_args
from fuzzdist.errors import PoolStartupError, RankCrash, RankError, RankTimeout

DEFAULT_TIMEOUT = 30.0
DEFAULT_STARTUP_TIMEOUT = 180.0
_STACK_WAIT = 2.0  # how long a signalled rank gets to write its stack
_KILL_WAIT = 5.0


@dataclass
class _Rank:
    rank: int
    process: Any  # multiprocessing.Process
    conn: Any  # multiprocessing.connection.Connection
    stack_path: str
    crash_path: str


class RankPool:
    """``world_size`` rank processes in one process group, reused for many examples.

    >>> with RankPool(2) as pool:
    ...     pool.run(my_check, spec, src)   # my_check(ctx, spec, src) on ranks 0 and 1
    [result_of_rank_0, result_of_rank_1]

    Args:
        world_size: number of ranks (processes).
        backend: process group backend: "gloo" (CPU ranks, or several ranks
            per GPU) or "nccl" (one GPU per rank).
        device: "cpu", or "cuda" where rank r uses GPU ``r % device_count``.
        timeout: seconds one example may take on every rank before it is a
            :class:`RankTimeout`.  Hypothesis's own deadline should be off:
            this is the deadline.
        startup_timeout: seconds the ranks get to start and join the group.
        straggler_grace: once a rank has failed, seconds the other ranks get
            to finish before they are taken as stuck (waiting in a collective
            the failed rank never joined) and the pool is restarted.
            Defaults to ``min(timeout, 5)``.
    """

    def __init__(
        self,
        world_size: int,
        backend: str = "gloo",
        device: str = "cpu",
        timeout: float = DEFAULT_TIMEOUT,
        *,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        straggler_grace: float | None = None,
    ) -> None:
        validate_pool_args(world_size, backend, device, timeout)
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self.timeout = float(timeout)
        self.startup_timeout = float(startup_timeout)
        self.straggler_grace = min(self.timeout, 5.0) if straggler_grace is None else float(straggler_grace)
        self.generation = 0  # how many times rank processes were started
        self.examples_run = 0
        self._ranks: list[_Rank] = []
        self._ready = False
        self._closed = False
        self._sent_sys_path: list[str] | None = None
        self._tmpdir = tempfile.mkdtemp(prefix="fuzzdist-pool-")
        self._finalizer = weakref.finalize(self, _cleanup, self._ranks, self._tmpdir)
        self._spawn()

    # -- public -----------------------------------------------------------------

    def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``fn(ctx, *args, **kwargs)`` on every rank at once; return the results in rank order.

        ``fn`` must be a top-level function of an importable module and the
        arguments plain picklable values.  Raises :class:`RankError`,
        :class:`RankTimeout` or :class:`RankCrash` if any rank fails.
        """
        payload = _pickle_call(fn, args, kwargs)
        _coverage.record(args, kwargs)
        return self._run_payload(payload, _derive_seed(payload))

    def start(self) -> RankPool:
        """Block until every rank has joined the process group (run() does this itself)."""
        self._ensure_ready()
        return self

    @property
    def pids(self) -> list[int]:
        """The rank processes' pids, in rank order."""
        return [r.process.pid for r in self._ranks]

    def close(self) -> None:
        """Stop the rank processes (bounded: stragglers are killed) and remove the pool's files."""
        if self._closed:
            return
        self._closed = True
        for r in self._ranks:
            try:
                r.conn.send_bytes(pickle.dumps(("stop",)))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + _KILL_WAIT
        for r in self._ranks:
            r.process.join(max(0.0, deadline - time.monotonic()))
        self._finalizer()

    def __enter__(self) -> RankPool:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("ready" if self._ready else "starting")
        return (f"RankPool(world_size={self.world_size}, backend={self.backend!r}, "
                f"device={self.device!r}, timeout={self.timeout:g}, {state})")

    # -- starting and stopping ranks ----------------------------------------------

    def _spawn(self) -> None:
        context = mp.get_context("spawn")
        self.generation += 1
        gen = self.generation
        store_path = os.path.join(self._tmpdir, f"store.{gen}")
        for rank in range(self.world_size):
            parent_conn, child_conn = context.Pipe(duplex=True)
            spec = _worker.WorkerSpec(
                rank=rank,
                world_size=self.world_size,
                backend=self.backend,
                device_type=self.device,
                pg_timeout_s=self.timeout + 30.0,  # the pool's timeout fires first, with stacks
                num_threads=max(1, (os.cpu_count() or 1) // self.world_size),
                store_path=store_path,
                tmpdir=self._tmpdir,
                stack_path=os.path.join(self._tmpdir, f"rank{rank}.gen{gen}.stack"),
                crash_path=os.path.join(self._tmpdir, f"rank{rank}.gen{gen}.crash"),
            )
            process = context.Process(target=_worker.main, args=(spec, child_conn),
                                      name=f"fuzzdist-rank{rank}", daemon=True)
            process.start()
            child_conn.close()
            self._ranks.append(_Rank(rank, process, parent_conn, spec.stack_path, spec.crash_path))
        self._sent_sys_path = list(sys.path)  # spawn hands the children our sys.path
        self._poller = _Poller(self._ranks)
        self._ready = False

    def _ensure_ready(self) -> None:
        if self._closed:
            raise RuntimeError("this RankPool is closed; create a new one")
        if self._ready:
            if all(r.process.exitcode is None for r in self._ranks):
                return
            dead = [r.rank for r in self._ranks if r.process.exitcode is not None]
            warnings.warn(f"fuzzdist: rank processes {dead} died between examples; restarting the pool",
                          RuntimeWarning, stacklevel=3)
            self._restart()
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        pending = {r.rank for r in self._ranks}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill()
                raise PoolStartupError(
                    f"ranks {sorted(pending)} did not join the {self.backend} process group within "
                    f"{self.startup_timeout:g}s; raise startup_timeout on a slow machine")
            for rank, is_sentinel in self._poller.wait(remaining):
                if rank not in pending:
                    continue
                message = self._receive(rank, is_sentinel)
                if message is None:
                    process = self._ranks[rank].process
                    process.join(_KILL_WAIT)
                    code = process.exitcode
                    self._kill()
                    raise PoolStartupError(
                        f"rank {rank} died while starting ({_describe(code)}) before it joined the process "
                        "group. If you start a RankPool from a script, guard it with "
                        "`if __name__ == \"__main__\":` (the spawn start method re-imports the main module "
                        "in every rank); its error, if any, is on stderr above.")
                if message[0] == "init-error":
                    self._kill()
                    raise PoolStartupError(f"rank {rank} could not join the {self.backend} process group:\n"
                                           f"{message[1]}")
                pending.discard(rank)
        self._ready = True

    def _restart(self) -> None:
        """Kill every rank and start fresh ones; the next example waits for them."""
        self._kill()
        if not self._closed:
            self._spawn()

    def _kill(self) -> None:
        _kill_ranks(self._ranks)
        self._ranks.clear()
        self._ready = False

    # -- running one example -------------------------------------------------------

    def _run_payload(self, payload: bytes, seed: int) -> list[Any]:
        self._ensure_ready()
        self.examples_run += 1
        seq = self.examples_run
        sys_path = None
        if sys.path != self._sent_sys_path:  # new test directories since the ranks started
            sys_path = self._sent_sys_path = list(sys.path)
        message = pickle.dumps(("run", seq, seed, payload, sys_path), protocol=pickle.HIGHEST_PROTOCOL)
        for r in self._ranks:
            try:
                r.conn.send_bytes(message)
            except OSError:
                break  # that rank is dead: its sentinel reports it below
        outcome = self._collect(seq)
        return self._conclude(outcome)

    def _collect(self, seq: int) -> _Outcome:
        n = self.world_size
        out = _Outcome(results=[None] * n)
        pending = set(range(n))
        deadline = time.monotonic() + self.timeout
        grace_deadline = float("inf")
        while pending and not out.dead:
            remaining = min(deadline, grace_deadline) - time.monotonic()
            if remaining <= 0:
                break
            for rank, is_sentinel in self._poller.wait(remaining):
                if rank not in pending:  # a rank that already answered has died
                    out.dead.add(rank)
                    continue
                message = self._receive(rank, is_sentinel, seq)
                if message is None:
                    out.dead.add(rank)
                    continue
                if message[1] != seq:
                    raise RuntimeError(f"fuzzdist bug: rank {rank} answered example {message[1]}, expected {seq}")
                pending.discard(rank)
                if not out.take(rank, message):
                    grace_deadline = min(grace_deadline, time.monotonic() + self.straggler_grace)
        if out.dead:
            out.dead.update(r.rank for r in self._ranks if r.process.exitcode is not None)
        out.pending = pending
        return out

    def _conclude(self, out: _Outcome) -> list[Any]:
        if out.dead:
            codes = {}
            for r in out.dead:
                process = self._ranks[r].process
                process.join(_KILL_WAIT)  # a rank whose pipe broke may not be reaped yet
                codes[r] = process.exitcode if process.exitcode is not None else -signal.SIGKILL
            stacks = {r: _read(self._ranks[r].crash_path) for r in out.dead}
            self._restart()
            raise RankCrash(sorted(out.dead), codes, stacks)
        if out.pending:
            stacks = self._dump_stacks(out.pending)
            self._restart()
            if out.errors:
                _raise_rank_error(out.errors, stragglers=out.pending, straggler_stacks=stacks)
            if not out.load_errors:
                raise RankTimeout(sorted(out.pending), self.timeout, stacks)
        elif out.recycle:
            self._restart()
        if out.load_errors:
            _raise_load_error(out.load_errors)
        if out.errors:
            _raise_rank_error(out.errors)
        return out.results

    def _dump_stacks(self, ranks: set[int]) -> dict[int, str]:
        for r in ranks:
            try:
                os.kill(self._ranks[r].process.pid, _worker.STACK_SIGNAL)
            except (ProcessLookupError, TypeError):
                pass
        stacks: dict[int, str] = {}
        deadline = time.monotonic() + _STACK_WAIT
        last = {r: "" for r in ranks}
        waiting = set(ranks)
        while waiting and time.monotonic() < deadline:
            time.sleep(0.05)
            for r in list(waiting):
                # faulthandler writes one thread at a time: done once the file stops growing.
                text = _read(self._ranks[r].stack_path)
                if text and text == last[r]:
                    stacks[r] = text
                    waiting.discard(r)
                last[r] = text
        for r in waiting:
            stacks[r] = last[r] or "(the rank did not answer the stack-dump signal)"
        return stacks

    def _receive(self, rank: int, is_sentinel: bool, seq: int = 0) -> tuple | None:
        """The rank's next message, or None if its pipe is closed (the process died).

        A reply the driver can't unpickle (torch 2.13 can't unpickle a uint16
        tensor, for one) becomes that rank's error, not a broken pool.
        """
        conn = self._ranks[rank].conn
        try:
            if is_sentinel and not conn.poll():
                return None  # the process exited with nothing left to read
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return None
        try:
            return pickle.loads(data)
        except Exception as exc:
            err = TypeError(f"rank {rank}'s reply can't be unpickled in the driver ({type(exc).__name__}: "
                            f"{exc}). Return plain values; send tensors of unusual dtypes as bytes or "
                            "a supported dtype.")
            return ("err", seq, _remote.capture(err), [])


class _Poller:
    """One poll set over every rank's pipe and process sentinel, built once per generation.

    ``multiprocessing.connection.wait`` builds a new selector on each call,
    which cost ~30us an example; this one is reused.
    """

    _EVENTS = select.POLLIN | select.POLLHUP | select.POLLERR

    def __init__(self, ranks: list[_Rank]) -> None:
        self._poll = select.poll()
        self._owners: dict[int, tuple[int, bool]] = {}
        for r in ranks:
            for fd, is_sentinel in ((r.conn.fileno(), False), (r.process.sentinel, True)):
                self._poll.register(fd, self._EVENTS)
                self._owners[fd] = (r.rank, is_sentinel)

    def wait(self, timeout_s: float) -> list[tuple[int, bool]]:
        """(rank, is_sentinel) for each pipe or sentinel that is ready, within timeout_s."""
        events = self._poll.poll(max(0, int(timeout_s * 1000) + 1))
        # Pipes first: a rank's last message is read before its death is noticed.
        return sorted((self._owners[fd] for fd, _ in events), key=lambda owner: owner[1])


@dataclass
class _Outcome:
    results: list[Any]
    errors: dict[int, Any] = field(default_factory=dict)  # rank -> RemoteRecord
    dead: set[int] = field(default_factory=set)
    pending: set[int] = field(default_factory=set)
    recycle: list[str] = field(default_factory=list)
    load_errors: dict[int, Any] = field(default_factory=dict)  # rank -> RemoteRecord

    def take(self, rank: int, message: tuple) -> bool:
        """File a rank's reply ("ok" | "err" | "load-error", seq, value, recycle); True if it succeeded."""
        kind, _, value, recycle = message
        self.recycle.extend(recycle)
        if kind == "ok":
            self.results[rank] = value
        elif kind == "load-error":
            self.load_errors[rank] = value
        else:
            self.errors[rank] = value
        return kind == "ok"


def _raise_rank_error(records: dict, stragglers: set[int] = frozenset(), straggler_stacks=None) -> None:
    exceptions = {r: _remote.rebuild(rec) for r, rec in records.items()}
    if all(rec.type_name == "hypothesis.errors.UnsatisfiedAssumption" for rec in records.values()):
        raise exceptions[min(exceptions)]  # assume()/reject() on the ranks: an invalid example
    error = RankError(
        ranks=sorted(records),
        tracebacks={r: rec.traceback for r, rec in records.items()},
        exc_types={r: rec.type_name for r, rec in records.items()},
        exceptions=exceptions,
        stragglers=sorted(stragglers),
        straggler_stacks=straggler_stacks,
    )
    # Chained to the lowest failing rank's exception, rebuilt at its remote site,
    # so Hypothesis tells different remote bugs apart.  Hypothesis reads
    # __context__, which `raise ... from` sets only inside an except block.
    primary = exceptions[min(exceptions)]
    error.__context__ = primary
    raise error from primary


def _raise_load_error(records: dict) -> None:
    rank = min(records)
    record = records[rank]
    raise TypeError(
        f"rank {rank} could not load the function or its arguments "
        f"({record.type_name.rsplit('.', 1)[-1]}: {record.message}). fn must be a top-level "
        "function of a module the rank processes can import (not one defined in an "
        "interactive session or a module that exists only in the driver).")


def _pickle_call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> bytes:
    if not callable(fn):
        raise TypeError(f"RankPool.run needs a callable fn(ctx, ...), got {fn!r}")
    qualname = getattr(fn, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise TypeError(
            f"{qualname} can't be sent to the rank processes: lambdas and nested functions can't be "
            "imported there. Define fn at the top level of a module (e.g. your test file).")
    try:
        return pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise TypeError(
            f"the call to {qualname or fn!r} can't be pickled for the rank processes ({exc}). "
            "fn must be a top-level function and its arguments plain picklable values: "
            "send drawn specs and seeds, and build large tensors on the ranks.") from exc


def _derive_seed(payload: bytes) -> int:
    """A seed that depends only on the example (the function and its arguments)."""
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little") >> 1


def _kill_ranks(ranks: list[_Rank]) -> None:
    for r in ranks:
        if r.process.exitcode is None:
            try:
                r.process.kill()
            except (OSError, AttributeError):
                pass
    deadline = time.monotonic() + _KILL_WAIT
    for r in ranks:
        r.process.join(max(0.0, deadline - time.monotonic()))
        r.conn.close()
        try:
            r.process.close()
        except ValueError:  # still running after SIGKILL and the wait: leave it to the OS
            pass


def _cleanup(ranks: list[_Rank], tmpdir: str) -> None:
    _kill_ranks(ranks)
    ranks.clear()
    shutil.rmtree(tmpdir, ignore_errors=True)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _describe(code: int | None) -> str:
    from fuzzdist.errors import describe_exit

    return "still running" if code is None else describe_exit(code)
