"""Transport 1: rank processes this driver starts, each talking to it over a private pipe.

This is the driver side, :class:`RankPool`: it starts the processes (forked
from a fork server or spawned: :mod:`fuzzdist.pool.starting`), sends each
message down every rank's pipe, polls the pipes and the processes' sentinels
with a deadline, reads a hung rank's stack from the file faulthandler writes
on a signal, and recovers by killing every rank and putting fresh ones in
their place (the spare set, started ahead of need, where there is one).
The rank side, what runs inside each rank process, is :mod:`fuzzdist.pool.rank.spawned` (its entry point
:func:`~fuzzdist.pool.rank.spawned.rank_main` joins the group over a
FileStore and lets a :class:`~fuzzdist.pool.rank.worker.Worker` answer the
pipe).

Every wait here is bounded: a rank that hangs is a ``RankTimeout``, a rank
that dies is a ``RankCrash``, and either way the pool kills every rank and
starts fresh ones before the next example.
"""

from __future__ import annotations

import multiprocessing.connection as mp_connection
import os
import select
import shutil
import signal
import socket
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Set
from dataclasses import dataclass
from typing import Any

from fuzzdist.errors import InvalidState, PoolGone, PoolStartupError, RankCrash
from fuzzdist.pool import framing, leftovers, messages, starting
from fuzzdist.pool.capabilities.pool_args import validate_pool_args
from fuzzdist.pool.controller import DEFAULT_TIMEOUT, Controller, Outcome, decode_reply
from fuzzdist.pool.rank import process_tree
from fuzzdist.pool.rank import rank_output as rank_output_mod
from fuzzdist.pool.rank.rank_state import RankState
from fuzzdist.pool.rank.spawned import STACK_SIGNAL, InheritedFd, RankSpec, rank_main

DEFAULT_STARTUP_TIMEOUT = 180.0
_STACK_WAIT = 2.0  # how long a signalled rank gets to write its stack
_PROBE_WAIT = 0.5  # how long a rank's watch thread gets to answer a probe during an example
_KILL_WAIT = 5.0


@dataclass
class _Rank:
    rank: int
    process: Any  # multiprocessing.Process
    conn: _Link  # the example messages, both ways
    watch: Any  # another pipe, to the rank's watch thread: snapshots while the example's thread is stuck
    stack_path: str
    crash_path: str
    output_path: str | None  # where the rank's stdout and stderr go (None: left alone, "live")
    reaped: bool = False  # its tree was killed and it was reaped: its pid may belong to another process now
    started: int | None = None  # a forked rank's start time: the fork server reaps it (see kill_tree)


class RankPool(Controller):
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
        rank_output: "capture" (the default) keeps what each rank writes
            (stdout, stderr, Python warnings) per example: shown with a
            failure, else summarised by pytest's plugin.  "live" lets the ranks
            print as they go, for debugging.
        start_method: "auto" (the default) forks CPU ranks on Linux from
            multiprocessing's fork server, which imports torch once, and spawns
            them elsewhere and for CUDA pools; "spawn" or "forkserver" to choose
            (see :mod:`fuzzdist.pool.starting`).
        spares: "auto" (the default) keeps a spare set of ranks started in the
            background from the pool's first restart on (a hang, a crash, a
            recycle), so that the next restart finds ranks already in their
            group; "always" from the start; "never".  At most one spare set;
            :meth:`memory` says what it costs.
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
        rank_output: str = "capture",
        start_method: str = "auto",
        spares: str = "auto",
    ) -> None:
        validate_pool_args(world_size, backend, device, timeout)
        self.rank_output = rank_output_mod.validate_mode(rank_output)
        self.start_method = starting.resolve_start_method(start_method, device)
        self.spares = starting.validate_spares(spares)
        super().__init__(world_size, backend, device, timeout, straggler_grace)
        self.startup_timeout = float(startup_timeout)
        self._ranks: list[_Rank] = []
        self._spare: _RankSet | None = None  # a replacement set, started ahead of need (see _restart)
        self.spares_replaced = 0  # spare sets that died while waiting and were started again
        self._sets_started = 0  # rank sets started, spares included: names their files and stores
        self._requests = 0  # snapshot requests sent, to tell a late answer from the current one
        self._ready = False
        self._ready_once = False  # its first ranks joined: a later start is a restart
        self._spent: PoolStartupError | None = None  # why its ranks could not be restarted (see _spend)
        self._closed = False
        leftovers.remove_leftovers()  # of dead drivers (SIGKILLed), this user's only
        self._folder = leftovers.pool_dir()  # its lock, held while the pool lives, keeps other cleaners off
        self._tmpdir = self._folder.path
        self._spare_ranks: list[_Rank] = []  # the spare set's ranks, also killed by the finalizer
        self._finalizer = weakref.finalize(self, _cleanup, self._ranks, self._spare_ranks, self._folder)
        self.generation += 1
        self._take(self._start_set())
        if self.spares == "always":
            self._start_spare()

    # -- public -----------------------------------------------------------------

    def start(self) -> RankPool:
        """Block until every rank has joined the process group (run() does this itself)."""
        self._ensure_ready()
        return self

    @property
    def pids(self) -> list[int]:
        """The rank processes' pids, in rank order."""
        return [r.process.pid for r in self._ranks]

    @property
    def spare_pids(self) -> list[int]:
        """The spare set's pids, in rank order ([] while the pool keeps no spare set)."""
        return [r.process.pid for r in self._spare.ranks] if self._spare is not None else []

    def memory(self) -> dict[str, list[int | None]]:
        """Memory (bytes, None where unknown) of each rank and each spare rank, in rank order.

        Each figure is the proportional set size of the rank's process tree (see
        :func:`~fuzzdist.pool.starting.tree_memory`): ranks forked from the fork server share
        torch's pages with it, so theirs is what each rank and spare adds.
        """
        spares = self._spare.ranks if self._spare is not None else []
        return {
            "ranks": [starting.tree_memory(r.process.pid) for r in self._ranks],
            "spares": [starting.tree_memory(r.process.pid) for r in spares],
        }

    @property
    def spent(self) -> bool:
        """Its ranks could not be restarted: every later ``run`` raises :class:`~fuzzdist.errors.PoolGone`."""
        return self._spent is not None

    def revive(self) -> None:
        """A spent pool (:attr:`spent`) tries fresh ranks once more; between tests, never inside an example.
        Raises PoolStartupError (and stays spent) if they can't start either."""
        if self._spent is None or self._closed:
            return
        self._spent = None
        self._restart()
        if self._spent is not None:
            raise self._spent
        self._ready_once = False  # the fresh ranks are a start: its error is theirs
        self._ensure_ready()

    def close(self) -> None:
        """Stop the rank processes (bounded: stragglers are killed) and remove the pool's files."""
        if self._closed:
            return
        self._closed = True
        stop = messages.stop()
        for r in self._ranks:
            try:
                r.conn.send_bytes(stop)
            except (OSError, ValueError):
                pass
        self._drop_spare()
        deadline = time.monotonic() + _KILL_WAIT
        for r in self._ranks:  # waited for, not reaped: _kill_ranks kills each tree before it reaps the rank
            _exited(r.process, max(0.0, deadline - time.monotonic()))
        self._finalizer()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("ready" if self._ready else "starting")
        output = "" if self.rank_output == "capture" else f", rank_output={self.rank_output!r}"
        return (
            f"RankPool(world_size={self.world_size}, backend={self.backend!r}, "
            f"device={self.device!r}, timeout={self.timeout:g}{output}, {state})"
        )

    # -- starting and stopping ranks ----------------------------------------------

    def _start_set(self) -> _RankSet:
        """Start ``world_size`` rank processes in a process group of their own (a new store)."""
        try:
            return self._start_set_with(self.start_method)
        except OSError as exc:
            if self.start_method != "forkserver":
                raise
            # The fork server could not be started or reached (a TMPDIR too long for its socket, ...):
            # this pool and every later one in this process spawn, as on a platform without one.
            starting.mark_unusable(f"the fork server could not be used here ({exc})")
            warnings.warn(
                f"fuzzdist: {starting.fork_server_fits()}; starting rank processes with spawn",
                RuntimeWarning,
                stacklevel=3,
            )
            self.start_method = "spawn"
            return self._start_set_with("spawn")

    def _start_set_with(self, method: str) -> _RankSet:
        context = starting.context(method)
        self._sets_started += 1
        n = self._sets_started
        store_path = os.path.join(self._tmpdir, f"store.{n}")
        ranks: list[_Rank] = []
        try:
            for rank in range(self.world_size):
                ranks.append(self._start_rank(context, rank, n, store_path))
        except BaseException:
            _kill_ranks(ranks)
            raise
        return _RankSet(ranks, _Poller(ranks))

    def _start_rank(self, context: Any, rank: int, n: int, store_path: str) -> _Rank:
        # One-way pipes, not Pipe(duplex=True)'s socketpair: on the machines measured a read from a
        # socket cost ~10 us against ~1-3 us from a pipe, and each example reads two per message.
        inbox, to_rank = context.Pipe(duplex=False)
        from_rank, outbox = context.Pipe(duplex=False)
        watch_parent, watch_child = context.Pipe(duplex=True)
        spec = RankSpec(
            rank=rank,
            world_size=self.world_size,
            backend=self.backend,
            device_type=self.device,
            pg_timeout_s=self.timeout + 30.0,  # the pool's timeout fires first, with stacks
            num_threads=max(1, (os.cpu_count() or 1) // self.world_size),
            store_path=store_path,
            tmpdir=self._tmpdir,
            stack_path=os.path.join(self._tmpdir, f"rank{rank}.set{n}.stack"),
            crash_path=os.path.join(self._tmpdir, f"rank{rank}.set{n}.crash"),
            output_path=(
                os.path.join(self._tmpdir, f"rank{rank}.set{n}.out") if self.rank_output == "capture" else None
            ),
            driver_pid=os.getpid(),
            from_main_thread=threading.current_thread() is threading.main_thread(),
            forked=self.start_method == "forkserver",
        )
        # daemon=True on this side: at exit multiprocessing kills the ranks instead of waiting for
        # them.  Each rank clears the flag on its own side, so that it may start processes (rank_main).
        # A forked rank gets the driver's stdout and stderr as they are now, as a spawned one does.
        stdio = (InheritedFd(1), InheritedFd(2)) if spec.forked else None
        process = context.Process(
            target=rank_main, args=(spec, inbox, outbox, watch_child, stdio), name=f"fuzzdist-rank{rank}", daemon=True
        )
        try:
            process.start()
        finally:
            inbox.close()
            outbox.close()
            watch_child.close()
        started = process_tree.start_time(process.pid) if spec.forked else None
        return _Rank(
            rank,
            process,
            _Link(to_rank, from_rank),
            watch_parent,
            spec.stack_path,
            spec.crash_path,
            spec.output_path,
            started=started,
        )

    def _take(self, rank_set: _RankSet) -> None:
        """Make ``rank_set`` the pool's ranks; the next example waits for them to be ready."""
        self._ranks[:] = rank_set.ranks
        self._poller = rank_set.poller
        self._sent_sys_path = list(sys.path)  # both start methods hand the children our sys.path
        self._ready = False

    def _start_spare(self) -> None:
        """Start a replacement set in the background: it joins a group of its own and waits, unread."""
        spare = self._start_set()
        self._spare = spare
        self._spare_ranks[:] = spare.ranks

    def _drop_spare(self) -> None:
        if self._spare is not None:
            _kill_ranks(self._spare.ranks)
            self._spare = None
            self._spare_ranks.clear()

    def _check_spare(self) -> None:
        """Replace a spare set one of whose ranks died while it waited (one poll of their sentinels)."""
        if self._spare is not None and self._spare.poller.exited():
            self._drop_spare()
            self.spares_replaced += 1
            self._start_spare()

    def _check_usable(self) -> None:
        if self._spent is not None:
            raise self._gone()

    def _ensure_ready(self) -> None:
        if self._closed:
            raise InvalidState("this RankPool is closed; create a new one")
        self._check_usable()
        if self._ready:
            dead = self._poller.exited()  # one poll of every sentinel, not a selector per rank
            if not dead:
                if self._spare is not None:
                    self._check_spare()
                return
            warnings.warn(
                f"fuzzdist: rank processes {dead} died between examples; restarting the pool",
                RuntimeWarning,
                stacklevel=3,
            )
            self._restart()
            self._check_usable()
        try:
            self._wait_ready()
        except PoolStartupError as exc:
            self._spend(exc)  # no ranks are left: never run an example on none
            if not self._ready_once:  # its first ranks: the start's own error
                raise
            raise self._gone() from exc  # restarted ranks that can't join: not a failure of the example
        self._ready_once = True

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        pending = {r.rank for r in self._ranks}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill()
                raise PoolStartupError(
                    f"ranks {sorted(pending)} did not join the {self.backend} process group within "
                    f"{self.startup_timeout:g}s; raise startup_timeout on a slow machine"
                )
            for rank, is_sentinel in self._poller.wait(remaining):
                if rank not in pending:
                    continue
                message = self._read(rank, is_sentinel, 0)
                if message is None:
                    code = _reap(self._ranks[rank], _KILL_WAIT)
                    self._kill()
                    raise PoolStartupError(
                        f"rank {rank} died while starting ({_describe(code)}) before it joined the process "
                        "group. If you start a RankPool from a script, guard it with "
                        '`if __name__ == "__main__":` (the spawn start method re-imports the main module '
                        "in every rank); its error, if any, is on stderr above."
                    )
                name, fields = message
                if name == "init_error":
                    self._kill()
                    raise PoolStartupError(
                        f"rank {rank} could not join the {self.backend} process group:\n{fields['traceback']}"
                    )
                pending.discard(rank)  # "ready"
        self._ready = True

    def _restart(self) -> None:
        """Kill every rank and put fresh ones in their place; the next example waits for them.

        The fresh ones are the spare set where there is one (already started, often already in their
        group), and a new spare set starts behind them.  Under ``spares="auto"`` the first restart
        starts the first spare: a pool that restarted once (a hang, a crash) is likely to again.

        Fresh ranks that can't be started (a full ``$TMPDIR``, no memory) leave the pool spent
        (:meth:`_spend`) instead of raising: the failure being recovered from is still the example's.
        """
        try:
            self._replace_ranks()
        except PoolStartupError as exc:
            self._spend(exc)
        except Exception as exc:  # noqa: BLE001 - OSError, most often: a full disk, too many processes or open files
            self._spend(PoolStartupError(f"could not start rank processes: {type(exc).__name__}: {exc}"))

    def _replace_ranks(self) -> None:
        self._kill()
        if self._closed:
            return
        leftovers.remove_leftovers()  # what the killed ranks (or one SIGKILLed in an example) left behind
        self.generation += 1
        if self._spare is not None:
            self._check_spare()
            spare, self._spare = self._spare, None
            self._spare_ranks.clear()
            self._take(spare)
        else:
            self._take(self._start_set())
        if self.spares != "never":
            try:
                self._start_spare()
            except Exception:  # noqa: BLE001 - the ranks in place can go on; the next restart starts a set itself
                self._spare = None

    def _spend(self, cause: PoolStartupError) -> None:
        """Its ranks could not be restarted: no ranks are left, and every later run raises PoolGone (a
        BaseException, so Hypothesis neither saves nor shrinks it as a failure of the property)."""
        self._kill()
        self._drop_spare()
        self._spent = cause

    def _gone(self) -> PoolGone:
        assert self._spent is not None  # only a spent pool is gone
        first = (str(self._spent).strip().splitlines() or ["(no message)"])[0]
        again = "restarted" if self._ready_once else "started"
        return PoolGone(
            self._spent, f"the rank pool can't run examples: its ranks could not be {again} (PoolStartupError: {first})"
        )

    def _kill(self) -> None:
        _kill_ranks(self._ranks)
        self._ranks.clear()
        self._ready = False

    # -- the transport: moving one example's bytes ------------------------------------

    def _send(self, seq: int, seed: int, payload: bytes, message: bytes) -> None:
        for r in self._ranks:
            try:
                r.conn.send_bytes(message)
            except OSError:
                break  # that rank is dead: its sentinel reports it

    def _receive(self, out: Outcome, seconds: float) -> bool:
        for rank, is_sentinel in self._poller.wait(seconds):
            if rank not in out.pending:  # a rank that already answered has died
                out.died(rank)
                continue
            message = self._read(rank, is_sentinel, out.seq)
            if message is None:
                out.died(rank)
            else:
                out.take(rank, message)
        return True

    def _crash(self, dead: Set[int]) -> RankCrash:
        dead = set(dead) | {r.rank for r in self._ranks if _exited(r.process)}
        codes = {}
        for r in dead:
            code = _reap(self._ranks[r], _KILL_WAIT)  # a rank whose pipe broke may not have ended yet
            codes[r] = code if code is not None else -signal.SIGKILL
        stacks = {r: _read_file(self._ranks[r].crash_path) for r in dead}
        last = {r: rank_output_mod.tail(path) for r in dead if (path := self._ranks[r].output_path)}
        return RankCrash(sorted(dead), codes, stacks, last_output=last)

    def _recover(self, failure: BaseException) -> None:
        self._restart()

    def _recycle(self, reasons: list[str]) -> None:
        self._restart()

    def _snapshots(
        self, seq: int, ranks: Set[int], with_stack: bool, records: bool = True
    ) -> dict[int, RankState | None]:
        self._requests += 1
        request = self._requests
        asked = {}
        for r in ranks:
            try:
                self._ranks[r].watch.send_bytes(messages.snapshot(request, seq, with_stack, records))
                asked[self._ranks[r].watch] = r
            except (OSError, ValueError):
                pass  # a dead rank: its sentinel reports it
        states: dict[int, RankState | None] = dict.fromkeys(ranks)
        deadline = time.monotonic() + (_STACK_WAIT if with_stack else _PROBE_WAIT)
        while asked:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for ready in mp_connection.wait(list(asked), remaining):
                conn = ready if not isinstance(ready, int | socket.socket) else None
                if conn is None:
                    continue
                r = asked[conn]
                try:
                    name, fields = messages.load(conn.recv_bytes())
                except (EOFError, OSError):
                    del asked[conn]
                    continue
                if fields.get("request") == request:  # not a late answer to an earlier request
                    states[r] = fields["state"]
                    del asked[conn]
        return states

    def _stacks(self, seq: int, ranks: Set[int]) -> dict[int, str]:
        for r in ranks:
            try:
                os.kill(self._ranks[r].process.pid, STACK_SIGNAL)
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
                text = _read_file(self._ranks[r].stack_path)
                if text and text == last[r]:
                    stacks[r] = text
                    waiting.discard(r)
                last[r] = text
        for r in waiting:
            stacks[r] = last[r] or "(the rank did not answer the stack-dump signal)"
        return stacks

    def _read(self, rank: int, is_sentinel: bool, seq: int) -> messages.Message | None:
        """The rank's next message, or None if its pipe is closed (the process died)."""
        conn = self._ranks[rank].conn
        try:
            if is_sentinel and not conn.poll():
                return None  # the process exited with nothing left to read
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return None
        return decode_reply(data, rank, seq)


@dataclass
class _RankSet:
    """One set of ``world_size`` rank processes in a group of their own, and the poll set over them."""

    ranks: list[_Rank]
    poller: _Poller


class _Link:
    """The driver's ends of a rank's two one-way pipes: messages to the rank, and its replies
    (framed by :mod:`~fuzzdist.pool.framing`; the Connections only own the descriptors)."""

    def __init__(self, to_rank: Any, from_rank: Any) -> None:
        self._to, self._from = to_rank, from_rank
        self._to_fd = to_rank.fileno()
        self._reader = framing.Reader(from_rank.fileno())
        self.recv_bytes = self._reader.recv
        self.poll = self._reader.ready
        self.fileno = from_rank.fileno

    def send_bytes(self, data: bytes) -> None:
        if self._to.closed:
            raise OSError("the pipe to the rank is closed")
        framing.send(self._to_fd, data)

    def close(self) -> None:
        self._to.close()
        self._from.close()


class _Poller:
    """One poll set over every rank's pipe and process sentinel, built once per generation.

    ``multiprocessing.connection.wait`` builds a new selector on each call,
    which cost ~30us an example; this one is reused.
    """

    _EVENTS = select.POLLIN | select.POLLHUP | select.POLLERR

    def __init__(self, ranks: list[_Rank]) -> None:
        self._poll = select.poll()
        self._sentinels = select.poll()
        self._owners: dict[int, tuple[int, bool]] = {}
        for r in ranks:
            for fd, is_sentinel in ((r.conn.fileno(), False), (r.process.sentinel, True)):
                self._poll.register(fd, self._EVENTS)
                self._owners[fd] = (r.rank, is_sentinel)
            self._sentinels.register(r.process.sentinel, self._EVENTS)

    def exited(self) -> list[int]:
        """The ranks whose process has ended (not reaped: see :func:`_exited`), without waiting."""
        return sorted(self._owners[fd][0] for fd, _ in self._sentinels.poll(0))

    def wait(self, timeout_s: float) -> list[tuple[int, bool]]:
        """(rank, is_sentinel) for each pipe or sentinel that is ready, within timeout_s."""
        events = self._poll.poll(max(0, int(timeout_s * 1000) + 1))
        # Pipes first: a rank's last message is read before its death is noticed.
        return sorted((self._owners[fd] for fd, _ in events), key=lambda owner: owner[1])


def _exited(process: Any, timeout: float = 0.0) -> bool:
    """Whether a rank process has ended (waiting up to ``timeout``), from its sentinel: it is not reaped, so
    its pid, the id of the group it leads, can't be reused before :func:`process_tree.kill_tree`."""
    return bool(mp_connection.wait([process.sentinel], max(0.0, timeout)))


def _reap(r: _Rank, timeout: float) -> int | None:
    """Wait up to ``timeout`` for a rank to end, kill its tree (before reaping it: see kill_tree), reap it;
    its exit code (None: it outlived the SIGKILL and the wait)."""
    if not r.reaped:
        _exited(r.process, timeout)
        process_tree.kill_tree(r.process.pid, r.started)
        r.process.join(_KILL_WAIT)
        r.reaped = r.process.exitcode is not None
    return r.process.exitcode


def _kill_ranks(ranks: list[_Rank]) -> None:
    for r in ranks:  # every tree before any rank is reaped (.exitcode reaps): a reaped pid may be reused
        if not r.reaped:
            process_tree.kill_tree(r.process.pid, r.started)  # the rank and every process it started
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
        r.watch.close()
        try:
            r.process.close()
        except ValueError:  # still running after SIGKILL and the wait: leave it to the OS
            pass


def _cleanup(ranks: list[_Rank], spare_ranks: list[_Rank], folder: leftovers.Owned) -> None:
    _kill_ranks(ranks + spare_ranks)
    ranks.clear()
    spare_ranks.clear()
    shutil.rmtree(folder.path, ignore_errors=True)
    folder.release()  # after: a cleaner that takes the lock finds nothing left


def _read_file(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _describe(code: int | None) -> str:
    from fuzzdist.errors import describe_exit

    return "still running" if code is None else describe_exit(code)
