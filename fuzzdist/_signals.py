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
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
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
        outermost = delivery is None
        if delivery is None:
            delivery = _deliveries[signum] = _Delivery()
        try:
            if not self._removed:
                delivery.ran.append(self)
            try:
                _call(self.previous, signum, frame, delivery)
            finally:
                if not self._removed:
                    self._handler(signum, frame)
        finally:
            if outermost:
                del _deliveries[signum]
                if delivery.default_owed and not any(h.ends_process() for h in delivery.ran):
                    default_action(signum)


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
