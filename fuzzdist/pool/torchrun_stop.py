"""Under torchrun, what a SIGTERM during an example means: a rank died, or the job is being stopped.

torchrun's agent SIGTERMs every worker when one dies; a user or a
scheduler stopping the job SIGTERMs them all too (through the agent), and
a user may SIGTERM rank 0 alone.  Only the first is a failure to save.  To
tell them apart each serving rank marks in torchrun's store that it got the
SIGTERM (:class:`SigtermMark`), and rank 0, on its own SIGTERM, gives the
other ranks :data:`VERDICT_S` to show they are alive: by their mark, or by a
heartbeat.  Those that show neither died (:class:`Verdict`): the example is
a ``RankCrash`` of exactly those ranks.  A rank that marked was stopped, not
crashed, so a stopped job records no false crash.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from fuzzdist.pool.signals import ChainedHandler

VERDICT_S = 2.0  # rank 0's wait for the marks: four heartbeats (HEARTBEAT_S = 0.5)
MARK_WAIT_S = 1.0  # a serving rank's handler waits this long for its mark before SIGTERM ends the process
EXIT_GRACE_S = 1.0  # then its main thread, if blocked in a collective, is not waited for
_POLL_S = 0.02


def mark_key(prefix: str, rank: int) -> str:
    """The store key that says ``rank`` received a SIGTERM."""
    return f"{prefix}sigterm/{rank}"


class SigtermMark:
    """A serving rank's SIGTERM, noted in the store at once, then the process ends as SIGTERM says.

    A Python signal handler runs only when the main thread gets back to
    Python code, which it does not while blocked in a collective.  So the
    signal is also written to a wakeup fd (``signal.set_wakeup_fd``), which a
    thread of its own watches: it sets the mark within milliseconds.  The
    handler (chained to the one it replaced) waits for the mark, up to
    :data:`MARK_WAIT_S`, before SIGTERM's default action ends the process.
    If SIGTERM would have ended the process at once (SIG_DFL below) and the
    main thread is still blocked :data:`EXIT_GRACE_S` after the mark, the
    watching thread ends the process itself (exit code 128 + SIGTERM).
    Install it from the main thread; :meth:`remove` undoes it.
    """

    def __init__(self, store: Any, key: str) -> None:
        self._store, self._key = store, key
        self.marked = threading.Event()
        self._stop = threading.Event()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        try:
            self._handler = ChainedHandler(signal.SIGTERM, self._on_sigterm)
        except BaseException:
            signal.set_wakeup_fd(self._previous_fd)
            raise
        self._ends_at_once = self._handler.previous in (signal.SIG_DFL, None)
        self._thread = threading.Thread(target=self._watch, name="fuzzdist-sigterm", daemon=True)
        self._thread.start()

    def remove(self) -> None:
        """Stop watching and put the previous handler and wakeup fd back (main thread)."""
        self._stop.set()
        try:
            os.write(self._write, b"\0")  # wakes the watching thread's select
        except OSError:
            pass
        self._handler.remove()
        current = signal.set_wakeup_fd(self._previous_fd)
        if current != self._write:  # another was set over ours since: leave it
            signal.set_wakeup_fd(current)
        self._thread.join(timeout=1.0)
        if not self._thread.is_alive():
            os.close(self._read)
            os.close(self._write)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.marked.wait(MARK_WAIT_S)  # the default action that follows must not beat the mark

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._read], [], [], 0.5)
                data = os.read(self._read, 512) if ready else b""
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:  # closed: the process is ending
                return
            if signal.SIGTERM.value in data:
                self._mark()
                return

    def _mark(self) -> None:
        try:
            self._store.set(self._key, b"1")
        except Exception:  # noqa: BLE001 - the store is gone: the job is ending anyway
            pass
        self.marked.set()
        if self._ends_at_once and not self._stop.wait(EXIT_GRACE_S):
            os._exit(128 + signal.SIGTERM)  # the main thread is stuck (in a collective): end as SIGTERM would


class Verdict:
    """Rank 0's reading, after its SIGTERM, of which other ranks died: within :data:`VERDICT_S` each
    either marked its SIGTERM (stopped), beat (alive: only rank 0 was signalled), or neither (died)."""

    def __init__(self, store: Any, prefix: str, ranks: Iterable[int], beats: Callable[[int], int]) -> None:
        self._store, self._prefix, self._beats = store, prefix, beats
        self.deadline = time.monotonic() + VERDICT_S
        self._first: dict[int, int | None] = {r: self._beat(r) for r in ranks}
        self._alive: set[int] = set()

    def dead(self, ranks: Iterable[int]) -> set[int] | None:
        """Which of ``ranks`` died; None while some are still undecided and there is time left.

        A store that no longer answers means torchrun's agent is going away (the
        job is being stopped): nobody is taken for dead.
        """
        undecided = set()
        try:
            for r in ranks:
                if r in self._alive or self._store.check([mark_key(self._prefix, r)]):
                    continue
                first = self._first.setdefault(r, self._beat(r))
                if first is not None and self._beat(r) != first:
                    self._alive.add(r)
                    continue
                undecided.add(r)
        except Exception:  # noqa: BLE001 - see the docstring
            return set()
        if not undecided:
            return set()
        if time.monotonic() >= self.deadline:
            return undecided
        return None

    def _beat(self, rank: int) -> int | None:
        try:
            return self._beats(rank)
        except Exception:  # noqa: BLE001
            return None

    def wait(self, ranks: Callable[[], Iterable[int]], step: Callable[[float], None]) -> set[int]:
        """Decide, calling ``step(seconds)`` between readings (it files the replies still arriving, and
        bounds its own wait); ``ranks()`` are the ranks still in question.  Returns within VERDICT_S."""
        while True:
            dead = self.dead(ranks())
            if dead is not None:
                return dead
            step(min(_POLL_S, max(0.0, self.deadline - time.monotonic())))
