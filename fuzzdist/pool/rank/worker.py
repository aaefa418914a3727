"""The code that runs inside a rank, whichever transport brought it there.

A rank never decides anything: its :class:`Worker` answers the controller's
messages (:mod:`fuzzdist.pool.messages`) one at a time, dispatched by name
to ``on_<name>`` methods.  ``on_run`` runs the call isolated and seeded
(:func:`execute`), reports the outcome and restores the rank's state.  How
the messages arrive is the transport's business (a :class:`Channel`): a
pipe for a spawned rank (``local.py``), torchrun's store (``torchrun.py``).
"""

from __future__ import annotations

import pickle
import sys
import time
from typing import Any, Protocol

from fuzzdist.errors import CallError
from fuzzdist.pool import messages
from fuzzdist.pool.rank import line_cover, rank_output, rank_state


class Channel(Protocol):
    """How a rank's messages move: the transport's half of :meth:`Worker.serve`."""

    lost_exit_code: int  # what serve() returns when the controller went away

    def receive(self) -> messages.Message | None:
        """The controller's next message, or None once the controller is gone."""
        ...

    def send(self, data: bytes) -> bool:
        """Send a reply; False if the controller is gone."""
        ...


def answer_snapshot(request: int, seq: int, with_stack: bool, records: bool = True) -> bytes:
    """The reply to a :func:`messages.snapshot`, from the thread that watches this rank."""
    from fuzzdist.pool.rank import rank_state

    return messages.state(request, rank_state.snapshot(seq, with_stack, records))


class Worker:
    """A rank's side of the pool protocol: answers the controller's messages until told to stop."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.stopped = False
        self._guard: Any = None  # the next example's StateGuard, taken while the rank waits for it

    def serve(self, channel: Channel) -> int:
        """Answer messages until a stop (return 0) or until the controller goes away."""
        while not self.stopped:
            message = channel.receive()
            if message is None:
                return channel.lost_exit_code
            reply = messages.dispatch(self, message)
            if reply is not None and not channel.send(reply):
                return channel.lost_exit_code
            if self._guard is None and not self.stopped:
                # Snapshot the state for the next example now, off its critical path: the example just
                # restored it and nothing but read-only plumbing threads runs before the next one.
                self._guard = _rank_modules()[0].StateGuard()
        return 0

    def on_run(self, seq: int, seed: int, payload: bytes, sys_path: list[str] | None, cover: Any = None) -> bytes:
        line_cover.request(cover)  # --cover: what to measure, and the scope its new lines count in
        if sys_path is not None:  # the driver's test directories (pytest puts them on sys.path)
            sys.path[:] = sys_path
        guard, self._guard = self._guard, None  # each snapshot serves one example
        return execute(self.ctx, seq, seed, payload, guard)

    def on_stop(self) -> None:
        self.stopped = True


def execute(ctx: Any, seq: int, seed: int, payload: bytes, guard: Any = None) -> bytes:
    """Run one pickled call on this rank, isolated and seeded; return the reply message.

    ``guard``: a :class:`~fuzzdist.pool.rank.isolation.StateGuard` taken since the last example was restored
    (None: take it now).  Also how rank 0 under torchrun runs its own share (it is its own driver).
    """
    _isolation, _remote = _rank_modules()
    if guard is None:
        guard = _isolation.StateGuard()
    ctx.seed, ctx.example = seed, seq
    ctx._recycle_reasons = []
    try:
        fn, args, kwargs = pickle.loads(payload)
    except BaseException as exc:  # noqa: BLE001
        return messages.load_error(seq, _remote.capture(exc))
    error = None
    rank_state.begin_example(ctx.rank, seq)  # a hang's snapshot looks at this thread
    with rank_output.example() as written:  # what the example prints travels with its reply
        started = time.perf_counter()
        try:
            _isolation.seed_everything(seed, ctx.device.type == "cuda")
            line_cover.begin()  # --cover: record the lines of the named packages the example reaches
            result = fn(ctx, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the driver
            error = _remote.capture(exc)
        finally:
            elapsed = time.perf_counter() - started  # the rank's wall time, for observability
            lines = line_cover.end()  # --cover: None when off
            rank_state.end_example()
    recycle = ctx._recycle_reasons
    recycle.extend(guard.restore())
    if error is not None:
        return messages.err(seq, error, recycle, written.output, elapsed, cover=lines)
    try:
        return messages.ok(seq, result, recycle, written.output, elapsed, cover=lines)
    except Exception as exc:  # noqa: BLE001 - an unpicklable return value
        unsendable = CallError(
            f"fn returned a value that can't be sent back to the driver: {exc}. "
            "Return plain values (numbers, lists, CPU tensors), not handles."
        )
        return messages.err(seq, _remote.capture(unsendable), recycle, written.output, elapsed, cover=lines)


_loaded: tuple[Any, Any] | None = None


def _rank_modules() -> tuple[Any, Any]:
    """``fuzzdist.pool.rank.isolation`` and ``fuzzdist.pool.remote``: imported on a rank's first
    example (they need torch), then kept (an import statement per example cost a few microseconds)."""
    global _loaded
    if _loaded is None:
        from fuzzdist.pool import remote as _remote
        from fuzzdist.pool.rank import isolation as _isolation

        _loaded = (_isolation, _remote)
    return _loaded
