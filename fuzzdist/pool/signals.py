"""Signal handlers that compose: each one runs the handler it replaced, and they can be removed in any order.

Under ``torchrun -m fuzzdist run`` two parts of fuzzdist handle SIGTERM:
the :class:`~fuzzdist.pool.TorchrunPool` (the example in flight becomes a
``RankCrash``) and the campaign (it ends cleanly and writes its report).
Installed with plain ``signal.signal``, whichever came last would silence
the other.  A :class:`ChainedHandler` instead calls the handler it replaced
(the *previous* one) and then its own, so every handler runs whatever the
order of installation.

At the bottom of a chain, SIG_IGN does nothing.  SIG_DFL (or a handler not
installed from Python) means the signal would end the process: once every
handler in the chain has run, the signal's default action follows, unless
one of them says it ends the process itself (``ends_process``, e.g. the
campaign, which raises and returns from ``fuzzdist run``).  So a SIGTERM is
never swallowed, and never ends the process before every handler has run.

A :class:`Hold` postpones what a chain does to the main thread: while one is
open, the exception a chain raises and the default action it owes wait
until the hold ends.  The TorchrunPool holds SIGTERM while it runs an
example, so that it can first tell whether a rank died (then the example is
a ``RankCrash``, which Hypothesis saves) before the campaign's
``Terminated`` cuts the example short.

A handler's exception is raised wherever the main thread happens to be, and
where that is a weakref callback or a ``__del__``, Python swallows it ("Exception
ignored in ...") and the work goes on as if no signal had come.  While a
ChainedHandler is installed, such a swallowed interrupt is kept and raised
again at the next safe point (:func:`raise_swallowed`, which the pool calls
while it waits for the ranks).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

Handler = Callable[[int, FrameType | None], Any]


class _Delivery:
    """One arrival of a signal, while its chain of handlers runs."""

    def __init__(self) -> None:
        self.ran: list[ChainedHandler] = []
        self.default_owed = False  # the chain ends in SIG_DFL


_deliveries: dict[int, _Delivery] = {}  # handlers run in the main thread only: no lock needed


class ChainedHandler:
    """``handler`` for ``signum``, installed over the handler that was there and chaining to it.

    When the signal arrives, the previous handler runs first, then ``handler``,
    also when the previous one raised; if both raise, ``handler``'s exception
    wins (chained from the other).  ``ends_process`` (a bool, or a callable
    asked when the signal arrives) says that ``handler`` sees to the end of
    the process, so SIG_DFL's default action is not needed.  Like
    ``signal.signal``, it must be created and removed in the main thread.
    """

    def __init__(self, signum: int, handler: Handler, *, ends_process: bool | Callable[[], bool] = False) -> None:
        self.signum = signum
        self._handler = handler
        self._ends_process = ends_process
        self._removed = False
        self.previous: Any = signal.signal(signum, self)  # raises ValueError outside the main thread
        keep_swallowed_interrupts()

    def ends_process(self) -> bool:
        """Does this handler see to the end of the process, just now?"""
        return self._ends_process() if callable(self._ends_process) else self._ends_process

    def remove(self) -> None:
        """Stop handling the signal: put the previous handler back if this one is still installed;
        if another was installed over it since, stay in the chain as a pass-through."""
        if self._removed:
            return
        self._removed = True
        try:
            current: Any = signal.getsignal(self.signum)
            if current is self:
                signal.signal(self.signum, _restorable(self.previous))
        except ValueError:  # not the main thread: stay a pass-through
            pass

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        delivery = _deliveries.get(signum)
        if delivery is not None:  # a link further down the chain being delivered
            self._run(signum, frame, delivery)
            return
        delivery = _deliveries[signum] = _Delivery()
        try:
            self._run(signum, frame, delivery)
        except BaseException as exc:
            hold = _open_hold(signum)
            if hold is None:
                raise
            hold.owed.exception = exc  # the latest wins, as for handlers raising in one chain
        finally:
            del _deliveries[signum]
            if delivery.default_owed and not any(h.ends_process() for h in delivery.ran):
                hold = _open_hold(signum)
                if hold is None:
                    default_action(signum)
                else:
                    hold.owed.default_action = True

    def _run(self, signum: int, frame: FrameType | None, delivery: _Delivery) -> None:
        if not self._removed:
            delivery.ran.append(self)
        try:
            _call(self.previous, signum, frame, delivery)
        finally:
            if not self._removed:
                self._handler(signum, frame)


class _Owed:
    """What a held signal's chain still has to do: raise its exception, or the signal's default action."""

    def __init__(self) -> None:
        self.exception: BaseException | None = None
        self.default_action = False

    def __bool__(self) -> bool:
        return self.exception is not None or self.default_action

    def deliver(self, signum: int) -> None:
        if self.exception is not None:
            exc, self.exception = self.exception, None
            raise exc
        if self.default_action:
            default_action(signum)


_holds: dict[int, list[Hold]] = {}  # open holds per signal, innermost last (main thread only)
_raise_later: dict[int, BaseException] = {}  # raised by a chain during a hold that ended with a failure


class Hold:
    """While open (in the main thread), what the chains of :class:`ChainedHandler` for ``signum`` would
    raise, or the default action they owe, waits: the signal's handlers all run at once, their effect on
    the main thread's work waits for the hold to end.

    When the hold ends normally, the owed exception is raised (or the default action done) there.  When
    it ends with an exception of its own (a failure to report), that exception goes on unchanged: the
    owed exception is raised when the next hold for ``signum`` opens, and the default action is not
    done, since ending the process would lose the failure; the holder sees to ending the work (a spent
    TorchrunPool raises PoolGone).  Opened outside the main thread, where handlers don't run, a hold
    does nothing.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.owed = _Owed()
        self._open = False

    def __enter__(self) -> Hold:
        if threading.current_thread() is not threading.main_thread():
            return self
        earlier = _raise_later.pop(self.signum, None)
        if earlier is not None:
            raise earlier
        _holds.setdefault(self.signum, []).append(self)
        self._open = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if not self._open:
            return
        self._open = False
        _holds[self.signum].remove(self)
        owed, self.owed = self.owed, _Owed()
        if not owed:
            return
        outer = _open_hold(self.signum)
        if outer is not None:  # nested: the outer hold delivers it
            outer.owed.exception = owed.exception or outer.owed.exception
            outer.owed.default_action = owed.default_action or outer.owed.default_action
        elif exc_type is not None:
            if owed.exception is not None:
                _raise_later[self.signum] = owed.exception
        else:
            owed.deliver(self.signum)


def held(signum: int) -> bool:
    """Is a :class:`Hold` for ``signum`` open?"""
    return _open_hold(signum) is not None


def _open_hold(signum: int) -> Hold | None:
    holds = _holds.get(signum)
    return holds[-1] if holds else None


_swallowed: list[BaseException] = []  # interrupts Python swallowed, oldest first


def keep_swallowed_interrupts() -> None:
    """Make sure ``sys.unraisablehook`` keeps a KeyboardInterrupt (``Terminated`` included) that Python
    swallowed, for :func:`raise_swallowed`; everything else goes to the hook that was there.  Idempotent;
    called again where another hook (pytest's, while a test runs) may have been put in front of ours."""
    current = sys.unraisablehook
    if getattr(current, "_fuzzdist_keeps_interrupts", False):
        return

    def keep(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _swallowed.append(unraisable.exc_value)
            return
        current(unraisable)

    keep._fuzzdist_keeps_interrupts = True  # type: ignore[attr-defined]
    sys.unraisablehook = keep


def raise_swallowed() -> None:
    """Raise the interrupt a weakref callback or ``__del__`` swallowed since the last call, if any (main
    thread only: signal handlers run there, and that is where the work must stop)."""
    if not _swallowed or threading.current_thread() is not threading.main_thread():
        return
    exc = _swallowed[0]
    _swallowed.clear()
    raise exc


def default_action(signum: int) -> None:
    """Do what SIG_DFL does with ``signum`` (for SIGTERM and SIGINT: end the process, killed by it)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _call(previous: Any, signum: int, frame: FrameType | None, delivery: _Delivery) -> None:
    if previous == signal.SIG_IGN:
        return
    if previous is None or previous == signal.SIG_DFL:
        delivery.default_owed = True
        return
    previous(signum, frame)


def _restorable(handler: Any) -> Any:
    """The handler to put back: removed ChainedHandlers are skipped; None (not set from Python) is SIG_DFL."""
    while isinstance(handler, ChainedHandler) and handler._removed:
        handler = handler.previous
    return signal.SIG_DFL if handler is None else handler


@contextlib.contextmanager
def interrupting(handler: Handler) -> Iterator[None]:
    """``handler`` chained over SIGINT and SIGTERM while the block runs, as a handler that sees to the
    end of the process itself (it raises), so no SIG_DFL default action follows it.  Outside the main
    thread, where no handler can be installed, the block runs without them."""
    installed: list[ChainedHandler] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            installed.append(ChainedHandler(sig, handler, ends_process=True))
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for chained in reversed(installed):
            chained.remove()
