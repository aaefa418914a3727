"""The named messages between a pool's controller and its ranks.

A message is a pickled ``(name, fields)`` pair, as in pytest-xdist
(``channel.send((eventname, kwargs))``): the receiver calls its method
``on_<name>(**fields)`` (:func:`dispatch`), so a field is read by name
where it is handled, never unpacked by position.  Both transports carry the
same messages: the local pool over each rank's pipe, the torchrun pool
through torchrun's store.  Each builder below is the one place a message's
fields are listed.

A plain tuple and dict keep a message as cheap to pickle as the positional
tuples they replace: one goes each way per rank per example.
"""

from __future__ import annotations

import pickle
from typing import Any

from fuzzdist.pool import line_coverage

Message = tuple[str, dict[str, Any]]

# -- controller -> rank ---------------------------------------------------------


def run(seq: int, seed: int, payload: bytes, sys_path: list[str] | None) -> bytes:
    """Run example ``seq``: ``payload`` is the pickled ``(fn, args, kwargs)``, ``seed`` seeds the RNGs.

    ``sys_path`` is the controller's ``sys.path`` when it changed since the
    last message (pytest adds test directories as it collects), else None.
    With ``--cover`` on (:mod:`fuzzdist.pool.line_coverage`) a ``cover`` field names the scope the
    rank's reached lines count in.
    """
    fields = {"seq": seq, "seed": seed, "payload": payload, "sys_path": sys_path}
    cover = line_coverage.scope_field()
    if cover is not None:  # --cover: the scope the ranks' new lines are counted in (no field when off)
        fields["cover"] = cover
    return _dump(("run", fields))


def snapshot(request: int, seq: int, with_stack: bool, records: bool = True) -> bytes:
    """Describe where example ``seq`` stands on this rank (answered by the rank's watch thread, not the
    example's: that one may be stuck); ``records=False`` leaves the flight recorder's records unread."""
    return _dump(("snapshot", {"request": request, "seq": seq, "with_stack": with_stack, "records": records}))


def stop() -> bytes:
    """Leave the process group and exit."""
    return _dump(("stop", {}))


# -- rank -> controller ---------------------------------------------------------


def ready(pid: int) -> bytes:
    """The rank joined the process group and waits for examples."""
    return _dump(("ready", {"pid": pid}))


def init_error(traceback: str) -> bytes:
    """The rank could not join the process group; ``traceback`` says why."""
    return _dump(("init_error", {"traceback": traceback}))


def ok(
    seq: int, result: Any, recycle: list[str], output: Any = None, elapsed: float | None = None, cover: Any = None
) -> bytes:
    """Example ``seq`` returned ``result``.

    ``recycle``: reasons this rank's process must be replaced before the
    next example (``ctx.request_recycle``, an allocator setting that can't
    be undone); empty when it can be reused.  ``output``: what the rank wrote
    during the example (a :class:`~fuzzdist.pool.rank.rank_output.RankOutput`), or None.
    ``elapsed``: the rank function's wall time in seconds, measured on the rank (None if unknown).
    ``cover``: with ``--cover``, the lines the rank reached first in the example
    (``{filename: [line, ...]}``, :mod:`fuzzdist.pool.rank.line_cover`); no field when None.
    """
    return _dump(
        (
            "ok",
            _with_cover(
                {"seq": seq, "result": result, "recycle": recycle, "output": output, "elapsed": elapsed}, cover
            ),
        )
    )


def err(
    seq: int, error: Any, recycle: list[str], output: Any = None, elapsed: float | None = None, cover: Any = None
) -> bytes:
    """Example ``seq`` raised: ``error`` is the exception as a :class:`~fuzzdist.pool.remote.RemoteRecord`."""
    return _dump(
        (
            "err",
            _with_cover({"seq": seq, "error": error, "recycle": recycle, "output": output, "elapsed": elapsed}, cover),
        )
    )


def load_error(seq: int, error: Any) -> bytes:
    """The rank could not unpickle example ``seq``'s function or arguments (a RemoteRecord)."""
    return _dump(("load_error", {"seq": seq, "error": error, "recycle": []}))


def state(request: int, state: Any) -> bytes:
    """The answer to snapshot ``request``: a :class:`~fuzzdist.pool.rank.rank_state.RankState`."""
    return _dump(("state", {"request": request, "state": state}))


# -- both ends --------------------------------------------------------------------


def load(data: bytes) -> Message:
    """The ``(name, fields)`` pair in ``data`` (may raise whatever unpickling raises)."""
    return pickle.loads(data)


def dispatch(handler: object, message: Message, *args: Any) -> Any:
    """Call ``handler.on_<name>(*args, **fields)``; a message ``handler`` has no method for is a bug."""
    name, fields = message
    method = getattr(handler, f"on_{name}", None)
    if method is None:
        raise RuntimeError(f"fuzzdist bug: {type(handler).__name__} got the unexpected message {name!r}")
    return method(*args, **fields)


def _with_cover(fields: dict[str, Any], cover: Any) -> dict[str, Any]:
    if cover is not None:  # the driver takes it off before filing the reply (line_coverage.absorb)
        fields["cover"] = cover
    return fields


def _dump(message: Message) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
