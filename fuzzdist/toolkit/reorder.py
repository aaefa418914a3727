"""``ReorderingProcessGroup``: a ProcessGroup whose Work objects complete in a drawn order.

A collective issued through :class:`ReorderingProcessGroup` runs at once on
the real process group it wraps (the pool's gloo group, for example), but on
*staging copies* of the caller's tensors.  The Work handed back to the caller
resolves only when the schedule releases it.  Resolving means three things,
in this order: the real Work is waited on, the staged result is copied into
the caller's tensors, and the Work's future is completed, so ``wait()``
returns.  Before its release the caller sees neither the data nor the
completion.  So the schedule really decides in what order results become
visible, for example in what order DDP's bucket allreduces land.

The schedule
------------
The schedule is a :class:`~fuzzdist.strategies.CompletionOrder` over ``n``
works (or a plain permutation of ``range(n)``).  Works that go through the
schedule ("held" ops, see ``ops``) are numbered in issue order and grouped in
*windows* of ``n`` consecutive works.  Within a window, offset ``i`` is
released only after every offset before it in ``resolution_order``:

* **At issue.** A work whose predecessors in the order have all been
  released is released at once, together with any works waiting behind it.
  When the window's ``n``-th work is issued, the whole window is released
  in schedule order, and the next work starts a new window.
* **At a visible wait.** ``wait()`` on a work of the subclass form is
  seen, whether Python or C++ calls it.  A work still held at that point
  has a predecessor in the order that was never issued: every other work
  was released at issue.  The caller is blocked in this wait, so it can
  never issue that predecessor, and the wait would deadlock.  So the wait
  *flushes* the window and returns once its work is released.
* **At a stall (deadlock breaker).** Some waits are invisible to the
  wrapper: a C++ ``future->wait()``, such as DDP's reducer waiting on the
  bucket futures, and every wait in the ``"future"`` form.  A watchdog
  thread therefore flushes the window once works are held and the thread
  that issued the last one is *stuck*.  Stuck means three things for at
  least ``stall_timeout`` seconds: no new op was issued, the thread is not
  inside a release of the wrapper's own, and the thread spent under a fifth
  of that time running or queued for a CPU (Linux
  ``/proc/self/task/<tid>/schedstat``).  The last condition tells a
  blocked thread from one that is merely slow or preempted on a loaded
  machine, so windows are not split at random.  Where schedstat is missing,
  the timeout alone decides.

A *flush* releases every held work of the window in schedule order, skipping
offsets that were never issued, and closes the window.  The next op starts a
fresh window, so windows realign with the caller's phases, for example one
backward pass's bucket allreduces.  A flush is the only way the drawn order
is not followed exactly: the works issued so far still resolve in their
drawn relative order.  ``release_log`` records every release and what
triggered it.

Outcomes and waits
------------------
* ``complete``: the staged result is copied in and the future completes
  with the caller's tensors.
* ``fail``: the future fails with :class:`ScheduledWorkFailure`, and the
  caller's tensors are left untouched.
* ``drop``: the wrapper abandons the work: its result is discarded and its
  future fails with :class:`ScheduledWorkDropped`.  A wait on it is woken
  instead of hanging forever.

A failed future fails at the C++ level too, so DDP's reducer raises.
Waiting on it raises a ``RuntimeError`` that quotes the error.  The subclass
form's ``wait()`` raises the error itself.  The future form's ``wait()``
returns True whatever happened: ``_create_work_from_future`` gives no way
to report an error there.  Read its future to see the error.

``("wait", i)`` steps describe what a caller does, not what the group
does, so the group ignores them.

The real op is always waited on before a work is released, whatever the
outcome, so every rank keeps entering the same collectives in the same
order.

Work forms (``work_form``)
--------------------------
* ``"subclass"``: a ``torch.distributed._Work`` subclass with ``wait`` and
  ``get_future`` overridden, like ``MyWork`` in torch's
  ``test_c10d_pypg.py``.  Its ``wait()`` is visible to the scheduler.
* ``"future"``: ``torch._C._distributed_c10d._create_work_from_future`` on
  the held future.  Every wait on it happens in C++.

Ops
---
``allreduce``, ``allreduce_coalesced``, ``broadcast``, ``allgather``,
``_allgather_base`` and ``barrier`` are supported.  DDP on CPU uses
``allgather`` (parameter shape check), ``broadcast`` (init sync, buffers,
bucket rebuild) and ``allreduce`` (buckets, unused-parameter map).  Only ops
named in ``ops`` go through the schedule.  The others resolve as soon as
their real op completes, inside the call that issues them, and take no
window slot.

CUDA tensors
------------
The group works on CUDA tensors as on CPU ones (over gloo, several ranks can
share one GPU; over nccl, one GPU per rank).  Each Work's future names the
devices of its tensors (:func:`future_devices`), so completing it records an
event on those devices' current streams, and DDP's reducer, chained on it,
waits for the copy of the result into its bucket.

Every wait is bounded.  A release waits on the real op for at most
``timeout`` seconds: gloo's ``Work.wait(timeout)`` raises past it, and the
work then fails with that error.  A visible wait gives up with
:class:`ReorderTimeout` after ``timeout`` seconds.  The watchdog makes sure
held works are released even when no one is seen waiting on them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future  # type: ignore[attr-defined]  # not in the stubs

from fuzzdist.errors import InvalidArgument, ReorderTimeout, ScheduledWorkDropped, ScheduledWorkFailure
from fuzzdist.pool.rank import rank_state
from fuzzdist.strategies import CompletionOrder

__all__ = [
    "SUPPORTED_OPS",
    "Release",
    "ReorderTimeout",
    "ReorderingProcessGroup",
    "ScheduledWorkDropped",
    "ScheduledWorkFailure",
    "WorkForm",
    "future_devices",
]

WorkForm = Literal["subclass", "future"]
SUPPORTED_OPS: frozenset[str] = frozenset(
    {"allreduce", "allreduce_coalesced", "broadcast", "allgather", "_allgather_base", "barrier"}
)


@dataclass(frozen=True)
class Release:
    """One resolved work, in the order works resolved.

    ``index``: issue number among all ops of the group; ``op``: the method
    name; ``outcome``: "complete", "fail" or "drop" as scheduled, or "error"
    when the real op itself failed; ``trigger``: what
    released it ("issue", "wait", "stall", "flush", "close", or "immediate"
    for ops outside the schedule); ``window`` and ``offset``: its place in
    the schedule (``None`` for immediate ops).
    """

    index: int
    op: str
    outcome: str
    trigger: str
    window: int | None
    offset: int | None


class _Entry:
    """One issued op: the real Work, the staging copies, and the future the caller holds."""

    __slots__ = (
        "index",
        "op",
        "real",
        "copy_back",
        "result",
        "source",
        "future",
        "done",
        "window",
        "offset",
        "outcome",
        "released",
        "error",
        "handle",
    )

    def __init__(
        self, index: int, op: str, real: Any, copy_back: Callable[[], None], result: list[torch.Tensor]
    ) -> None:
        self.index = index
        self.op = op
        self.real = real
        self.copy_back: Callable[[], None] | None = copy_back
        self.result = result
        # The caller gets ``future``, chained on ``source``: completing ``source`` with an
        # exception makes ``future`` fail at the C++ level too (a C++ waiter such as DDP's
        # reducer sees the error), which Future.set_exception alone does not do.
        # On CUDA the futures name the devices of the tensors they carry: completing one then
        # records an event on each device's current stream, and whoever waits on it or chains
        # on it (DDP's reducer) waits for that event.  A future without devices takes CUDA
        # tensors silently and synchronizes nothing (c10 ivalue::Future::markCompleted).
        self.source: torch.futures.Future[Any] = torch.futures.Future(devices=future_devices(result))
        self.future: torch.futures.Future[Any] = self.source.then(_unwrap)
        self.done = threading.Event()
        self.window: int | None = None
        self.offset: int | None = None
        self.outcome = "complete"
        self.released = False  # decided: on its way out or out
        self.error: BaseException | None = None
        # The Work handed out, kept alive as long as the group, as torch's own
        # test_c10d_pypg.py keeps its MyWork objects: a Python override must still be
        # there whenever C++ calls wait() or get_future().
        self.handle: Any = None


def future_devices(tensors: Sequence[Any]) -> list[int | str | torch.device]:
    """The accelerator devices of ``tensors``, sorted and without repeats: what a
    ``torch.futures.Future`` carrying them must name (``devices=``).  Empty for CPU tensors,
    whose futures name no device."""
    found = {t.device for t in tensors if t.device.type != "cpu"}
    return list(sorted(found, key=lambda d: (d.type, -1 if d.index is None else d.index)))


def _unwrap(source: torch.futures.Future[Any]) -> Any:
    """The callback chaining a work's future on its source: raise an outcome that is an error."""
    value = source.value()
    if isinstance(value, BaseException):
        raise value
    return value


class _Window:
    __slots__ = ("number", "issued", "released", "next")

    def __init__(self, number: int) -> None:
        self.number = number
        self.issued: dict[int, _Entry] = {}  # offset -> entry
        self.released: set[int] = set()
        self.next = 0  # position in the resolution order of the next offset to release


class _Scheduler:
    """The release state machine of a ReorderingProcessGroup (see the module docstring).

    Locking: ``_mutex`` guards the state and is never held while waiting
    on anything.  ``_release_lock`` (re-entrant) serializes releases, so
    works resolve in exactly the order they were decided.  A release waits
    on the real op while holding ``_release_lock``.  That is safe: every op
    it waits on has been issued locally, and by program order every other
    rank issues it too, without needing this lock.
    """

    def __init__(
        self,
        order: tuple[int, ...],
        outcomes: tuple[str, ...],
        held_ops: frozenset[str],
        stall_timeout: float | None,
        timeout: float,
    ) -> None:
        self.order = order
        self.position = {offset: pos for pos, offset in enumerate(order)}
        self.outcomes = outcomes
        self.held_ops = held_ops
        self.stall_timeout = stall_timeout
        self.timeout = timeout
        self.log: list[Release] = []
        self.entries: list[_Entry] = []  # every op issued, kept alive with the group
        self._mutex = threading.Lock()
        self._wake = threading.Condition(self._mutex)
        self._release_lock = threading.RLock()
        self._window: _Window | None = None
        self._windows = 0
        self._issues = 0  # held ops issued so far: the watchdog's progress counter
        self._issuer: int | None = None  # native id of the thread that issued the last held op
        self._releasing: dict[int, int] = {}  # native thread id -> depth, while inside a release
        self._watchdog: threading.Thread | None = None
        self._closed = False

    @property
    def n(self) -> int:
        return len(self.order)

    # -- issuing -----------------------------------------------------------

    def issue(self, op: str, real: Any, copy_back: Callable[[], None], result: list[torch.Tensor]) -> _Entry:
        with self._mutex:
            entry = _Entry(len(self.entries), op, real, copy_back, result)
            self.entries.append(entry)
            held = op in self.held_ops and self.n > 0 and not self._closed
            if held:
                if self._window is None:
                    self._window = _Window(self._windows)
                    self._windows += 1
                window = self._window
                entry.window, entry.offset = window.number, len(window.issued)
                entry.outcome = self.outcomes[entry.offset]
                window.issued[entry.offset] = entry
                self._issues += 1
                self._issuer = threading.get_native_id()
                self._wake.notify_all()
            else:
                entry.released = True
        if held:
            self._drain(self._decide_in_order, "issue")
            with self._mutex:
                if self._held():
                    self._ensure_watchdog()
        else:
            self._drain(lambda: [entry], "immediate")
        return entry

    # -- decisions (called with _mutex held; return entries marked released) --

    def _decide_in_order(self) -> list[_Entry]:
        """Release along the order while the next offset has been issued."""
        window = self._window
        out: list[_Entry] = []
        if window is None:
            return out
        while window.next < self.n:
            offset = self.order[window.next]
            if offset not in window.released:
                entry = window.issued.get(offset)
                if entry is None:
                    break
                window.released.add(offset)
                entry.released = True
                out.append(entry)
            window.next += 1
        if window.next == self.n:
            self._window = None  # complete: the next op starts a new window
        return out

    def _decide_flush(self) -> list[_Entry]:
        """Every held work of the window in schedule order; closes the window."""
        window = self._window
        if window is None:
            return []
        out = []
        for offset in self.order:
            entry = window.issued.get(offset)
            if entry is not None and offset not in window.released:
                window.released.add(offset)
                entry.released = True
                out.append(entry)
        self._window = None
        return out

    def _decide_wait(self, entry: _Entry) -> list[_Entry]:
        """A visible wait on a held work.  Releases along the order happen at issue, so a
        work still held here has a predecessor that was never issued, and the caller,
        blocked in this wait, cannot issue it: flush the window."""
        window = self._window
        if entry.released or window is None or entry.window != window.number:
            return []
        return self._decide_flush()

    # -- releasing -----------------------------------------------------------

    def _drain(self, decide: Callable[[], list[_Entry]], trigger: str, lock_timeout: float | None = None) -> bool:
        """Decide what to release (under _mutex), then release it in that order.

        False if ``_release_lock`` was not had within ``lock_timeout`` seconds (another
        thread is releasing: its real waits are bounded by ``timeout`` each)."""
        me = threading.get_native_id()
        if not self._release_lock.acquire(timeout=-1 if lock_timeout is None else lock_timeout):
            return False
        try:
            with self._mutex:
                self._releasing[me] = self._releasing.get(me, 0) + 1
                batch = decide()
            try:
                for entry in batch:
                    self._resolve(entry, trigger)
            finally:
                with self._mutex:
                    self._releasing[me] -= 1
                    if not self._releasing[me]:
                        del self._releasing[me]
        finally:
            self._release_lock.release()
        return True

    def _resolve(self, entry: _Entry, trigger: str) -> None:
        """Wait on the real op, then make the outcome visible.  Called with _release_lock held."""
        try:
            try:
                entry.real.wait(timedelta(seconds=self.timeout))  # gloo raises past it
            except BaseException as exc:  # noqa: BLE001 - the real op failed: so does this work
                entry.error = exc
            if entry.error is None and entry.outcome == "fail":
                entry.error = ScheduledWorkFailure(
                    f"work {entry.index} ({entry.op}) failed by schedule (window {entry.window}, offset {entry.offset})"
                )
            elif entry.error is None and entry.outcome == "drop":
                entry.error = ScheduledWorkDropped(
                    f"work {entry.index} ({entry.op}) dropped by schedule "
                    f"(window {entry.window}, offset {entry.offset}); its result was discarded"
                )
            if entry.error is None and entry.copy_back is not None:
                entry.copy_back()
            entry.copy_back = None  # frees the staging copies
            entry.real = None
            outcome = "error" if entry.outcome == "complete" and entry.error is not None else entry.outcome
            self.log.append(Release(entry.index, entry.op, outcome, trigger, entry.window, entry.offset))
            entry.source.set_result(entry.result if entry.error is None else entry.error)
        finally:
            entry.done.set()

    # -- waiting ---------------------------------------------------------------

    def wait(self, entry: _Entry, timeout: float | None = None) -> bool:
        """A visible wait on ``entry``: release what its turn needs, then wait, bounded.

        Bounded by ``timeout`` (default: the group's) for the release lock, then for
        the work to resolve; a release in this thread waits on the real op for at
        most the group's timeout."""
        bound = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + bound
        if not entry.done.is_set():
            self._drain(lambda: self._decide_wait(entry), "wait", lock_timeout=bound)
        if not entry.done.wait(max(0.0, deadline - time.monotonic())):
            raise ReorderTimeout(
                f"work {entry.index} ({entry.op}) not released within {bound:g} s "
                f"(window {entry.window}, offset {entry.offset})"
            )
        if entry.error is not None:
            raise entry.error
        return True

    def flush(self, trigger: str = "flush") -> None:
        self._drain(self._decide_flush, trigger)

    def pending(self) -> list[str]:
        """One line per issued work not yet resolved: what it waits for (for a hang's explanation)."""
        if not self._mutex.acquire(timeout=0.5):  # read from another thread: never block for long
            return ["(the scheduler's state is locked: a release is in progress)"]
        try:
            lines = []
            window = self._window
            for entry in self.entries:
                if entry.done.is_set():
                    continue
                where = f"work {entry.index} ({entry.op})"
                if entry.released or entry.window is None:
                    lines.append(f"{where}: released; waiting for its real {entry.op} to complete")
                elif window is not None and entry.window == window.number:
                    blocker = self.order[window.next] if window.next < self.n else None
                    issued = "never issued" if blocker not in window.issued else "issued, not yet released"
                    lines.append(
                        f"{where}: held at offset {entry.offset} of window {entry.window}; the drawn "
                        f"order {self.order} releases offset {blocker} first ({issued})"
                    )
                else:
                    lines.append(f"{where}: held in window {entry.window}, offset {entry.offset}")
            return lines
        finally:
            self._mutex.release()

    # -- the watchdog ------------------------------------------------------------

    def _held(self) -> bool:
        window = self._window
        return window is not None and len(window.released) < len(window.issued)

    def _ensure_watchdog(self) -> None:  # with _mutex held
        if self._watchdog is None and self.stall_timeout is not None:
            self._watchdog = threading.Thread(target=self._watch, name="fuzzdist-reorder-watchdog", daemon=True)
            self._watchdog.start()

    def _watch(self) -> None:
        """Flush the window once the issuing thread is stuck (see ``_stalled``).

        Exits as soon as nothing is held; issue() starts a new one when needed."""
        stall_timeout = self.stall_timeout
        assert stall_timeout is not None  # _ensure_watchdog starts no watchdog without one
        while True:
            with self._mutex:
                if not self._held() or self._closed:
                    self._watchdog = None
                    return
                issues, issuer = self._issues, self._issuer
            start, busy = time.monotonic(), _busy_ns(issuer)
            with self._mutex:
                self._wake.wait(stall_timeout)
                if not self._held() or self._closed or self._issues != issues:
                    continue  # progress: start a new interval
                releasing = issuer in self._releasing
            elapsed = time.monotonic() - start
            if elapsed < stall_timeout or releasing:
                continue  # woken early, or the issuer is inside a release (it will return)
            if _stalled(busy, _busy_ns(issuer), elapsed):
                self._drain(self._decide_flush, "stall")

    def close(self) -> None:
        self._drain(self._decide_flush, "close")
        with self._mutex:
            self._closed = True
            self._wake.notify_all()
            watchdog = self._watchdog
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(self.timeout)


def _busy_ns(tid: int | None) -> int | None:
    """Nanoseconds thread ``tid`` of this process has spent running or runnable (waiting
    for a CPU), from Linux's /proc schedstat; None where that is not available."""
    if tid is None:
        return None
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            running, waiting, _ = f.read().split()
        return int(running) + int(waiting)
    except (OSError, ValueError):
        return None


def _stalled(busy_before: int | None, busy_after: int | None, elapsed: float) -> bool:
    """Whether the issuing thread was blocked, not merely slow, over ``elapsed`` seconds.

    A thread blocked in a wait neither runs nor queues for a CPU.  A slow or
    preempted one does one or the other: on a loaded machine a thread can
    spend more time queued than running.  It also waits for the GIL, which
    counts as neither (a futex wait), and with a 5 ms switch interval that can
    be half of a 10 ms interval: with a half as the line, a busy issuer was
    taken for a blocked one in 2 of 260 runs of its test under four CPU hogs
    on 2 cores; with a fifth, in none of 200.
    The thread counts as blocked if it was running or queued for under a
    fifth of the interval; a blocked one is at about none.  Without
    schedstat, the interval passing is all there is to go on.
    """
    if busy_before is None or busy_after is None:
        return True
    return (busy_after - busy_before) < 0.2 * elapsed * 1e9


def _timeout_seconds(timeout: Any) -> float | None:
    """A wait's timeout argument (timedelta from C++, or seconds) in seconds; None = no bound given."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    else:
        seconds = float(timeout)
    return seconds if seconds > 0 else None  # C++'s kNoTimeout is 0 ms


class _HeldWork(dist._Work):
    """The ``"subclass"`` work form: a ``dist._Work`` whose ``wait`` the scheduler sees."""

    def __init__(self, scheduler: _Scheduler, entry: _Entry) -> None:
        super().__init__()
        self._scheduler = scheduler
        self._entry = entry

    def wait(self, timeout: Any = None) -> bool:  # C++ passes a timedelta (0 = no timeout)
        return self._scheduler.wait(self._entry, _timeout_seconds(timeout))

    def get_future(self) -> torch.futures.Future[Any]:
        return self._entry.future

    def is_completed(self) -> bool:
        return self._entry.done.is_set()

    def is_success(self) -> bool:
        return self._entry.done.is_set() and self._entry.error is None

    def exception(self) -> BaseException | None:
        return self._entry.error

    def __repr__(self) -> str:
        e = self._entry
        return f"<held work {e.index} {e.op} window={e.window} offset={e.offset} done={e.done.is_set()}>"


class ReorderingProcessGroup(dist.ProcessGroup):
    """Wraps ``inner`` and releases its Works in the order ``schedule`` draws.

    Args:
        inner: the real process group (for example ``ctx.group``).  Every op
            is issued on it at once, on staging copies.
        schedule: a ``CompletionOrder`` over ``n`` works, applied to each
            window of ``n`` consecutive held ops.  A permutation of
            ``range(n)`` means every work completes.  Empty (the default)
            releases every op as soon as its real op completes.
        work_form: ``"subclass"`` (a ``dist._Work`` subclass) or
            ``"future"`` (``_create_work_from_future``).
        ops: the op names that go through the schedule (default: all of
            ``SUPPORTED_OPS``).  The rest resolve at issue.
        stall_timeout: how long the issuing thread must be stuck, with works
            held, before the watchdog flushes the window (see the module
            docstring).  ``None`` turns the watchdog off, so only issues,
            visible waits and ``flush()`` release works.  Turn it off only
            when every wait on a held work is visible: a ``"subclass"`` Work
            waited on through ``wait()``, never through its future.
        timeout: in seconds, the bound on a visible wait and on each wait
            on a real op.

    Attributes:
        release_log: a list of :class:`Release`, one per resolved op, in
            the order they resolved.
    """

    def __init__(
        self,
        inner: dist.ProcessGroup,
        schedule: CompletionOrder | Sequence[int] = (),
        *,
        work_form: WorkForm = "subclass",
        ops: Collection[str] | None = None,
        stall_timeout: float | None = 0.01,
        timeout: float = 20.0,
    ) -> None:
        super().__init__(inner.rank(), inner.size())  # type: ignore[call-arg]  # the (rank, size) constructor Python subclasses use
        if work_form not in ("subclass", "future"):
            raise InvalidArgument(f"work_form must be 'subclass' or 'future', got {work_form!r}")
        if isinstance(schedule, CompletionOrder):
            order = schedule.resolution_order
            outcomes = tuple(schedule.outcome(i) for i in range(schedule.n))
        else:
            order = tuple(int(i) for i in schedule)
            outcomes = ("complete",) * len(order)
            if sorted(order) != list(range(len(order))):
                raise InvalidArgument(f"schedule must be a permutation of range(n), got {order}")
        held_ops = SUPPORTED_OPS if ops is None else frozenset(ops)
        unknown = held_ops - SUPPORTED_OPS
        if unknown:
            raise InvalidArgument(f"unsupported ops {sorted(unknown)}; choose from {sorted(SUPPORTED_OPS)}")
        if stall_timeout is not None and not stall_timeout > 0:
            raise InvalidArgument("stall_timeout must be > 0 seconds, or None")
        if not timeout > 0:
            raise InvalidArgument("timeout must be > 0 seconds")
        self._inner = inner
        self._rank = inner.rank()
        self._size = inner.size()
        self.work_form: WorkForm = work_form
        self.schedule = schedule
        self._scheduler = _Scheduler(order, outcomes, held_ops, stall_timeout, timeout)
        rank_state.watch_pending(self)  # a hang in this rank names this group's pending Works

    # -- introspection -----------------------------------------------------------

    @property
    def inner(self) -> dist.ProcessGroup:
        return self._inner

    @property
    def release_log(self) -> list[Release]:
        return self._scheduler.log

    @property
    def released_order(self) -> list[int]:
        """Issue indices of the resolved ops, in the order they resolved."""
        return [r.index for r in self._scheduler.log]

    def flush(self) -> None:
        """Release every held work now, in schedule order (closes the current window)."""
        self._scheduler.flush()

    def fuzzdist_pending_works(self) -> list[str]:
        """The Works issued and not yet resolved, with what each waits for
        (a :class:`~fuzzdist.pool.rank.rank_state.PendingWorkSource`)."""
        return [f"{self.getBackendName()} group: {line}" for line in self._scheduler.pending()]

    def close(self) -> None:
        """Flush, then stop the watchdog.  Ops issued later resolve at once."""
        self._scheduler.close()

    def __enter__(self) -> ReorderingProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ProcessGroup attributes -----------------------------------------------

    def getRank(self) -> int:
        return self._rank

    def getSize(self) -> int:
        return self._size

    def getBackendName(self) -> str:
        return "fuzzdist-reorder"

    def __repr__(self) -> str:
        return (
            f"ReorderingProcessGroup(rank={self._rank}, size={self._size}, "
            f"order={self._scheduler.order}, work_form={self.work_form!r})"
        )

    # -- ops -------------------------------------------------------------------

    def _issue(self, op: str, real: Any, copy_back: Callable[[], None], result: list[torch.Tensor]) -> dist._Work:
        entry = self._scheduler.issue(op, real, copy_back, result)
        if self.work_form == "future":
            entry.handle = _create_work_from_future(entry.future)
        else:
            entry.handle = _HeldWork(self._scheduler, entry)
        return entry.handle

    # The stubs overload these methods with torch.distributed's convenience forms (one tensor,
    # a timeout); the C++ dispatcher only ever calls a Python ProcessGroup with (tensors, opts).
    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:  # type: ignore[override]
        staging = [t.detach().clone() for t in tensors]
        real = self._inner.allreduce(staging, opts)
        return self._issue("allreduce", real, _copier(tensors, staging), tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:  # type: ignore[override]
        staging = [t.detach().clone() for t in tensors]
        real = self._inner.allreduce_coalesced(staging, opts)
        return self._issue("allreduce_coalesced", real, _copier(tensors, staging), tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:  # type: ignore[override]
        staging = [t.detach().clone() for t in tensors]
        real = self._inner.broadcast(staging, opts)
        return self._issue("broadcast", real, _copier(tensors, staging), tensors)

    def allgather(  # type: ignore[override]
        self,
        output_tensors: list[list[torch.Tensor]],
        input_tensors: list[torch.Tensor],
        opts: Any,
    ) -> dist._Work:
        staging_out = [[o.detach().clone() for o in outs] for outs in output_tensors]
        staging_in = [t.detach().clone() for t in input_tensors]
        real = self._inner.allgather(staging_out, staging_in, opts)
        flat_out = [o for outs in output_tensors for o in outs]
        flat_staging = [o for outs in staging_out for o in outs]
        return self._issue("allgather", real, _copier(flat_out, flat_staging), flat_out)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> dist._Work:  # type: ignore[override]  # noqa: A002
        staging_out = output.detach().clone()
        real = self._inner._allgather_base(staging_out, input.detach().clone(), opts)
        return self._issue("_allgather_base", real, _copier([output], [staging_out]), [output])

    def barrier(self, opts: Any) -> dist._Work:  # type: ignore[override]
        real = self._inner.barrier(opts)
        return self._issue("barrier", real, lambda: None, [])


def _copier(targets: list[torch.Tensor], staging: list[torch.Tensor]) -> Callable[[], None]:
    def copy_back() -> None:
        with torch.no_grad():
            for target, staged in zip(targets, staging, strict=False):
                target.copy_(staged)
                if staged.is_cuda:
                    # The copy may run on another thread's stream than the one the staging copy was
                    # made on: keep the allocator from reusing its memory until the copy has run.
                    staged.record_stream(torch.cuda.current_stream(staged.device))

    return copy_back
