"""What the ranks did in an example, in Hypothesis's observations (when observability is on).

Hypothesis writes one observation per test case for tools such as Tyche and
HypoFuzz.  For each ``pool.run`` of the example fuzzdist adds:

* ``features`` (through ``event()``): ``fuzzdist:world_size``,
  ``fuzzdist:backend``, ``fuzzdist:device``; ``fuzzdist:rank<N>``, how rank N
  ended (:data:`OUTCOMES`); and for a failure ``fuzzdist:failure`` (the
  error's type: ``RankError``, ``RankTimeout``, ``RankCrash``,
  ``PropertyFailure``...) and ``fuzzdist:hang``, the diagnosed
  :class:`~fuzzdist.errors.Hang` kind of the ranks that did not finish.
  Values are few and nominal, so Hypothesis's statistics and HypoFuzz's
  behaviours stay meaningful: times are not features.
* ``timing`` (through :mod:`fuzzdist.compat.hypothesis_internals`): ``fuzzdist:rank<N>``,
  rank N's wall time in seconds as the rank measured it (summed over the
  example's ``pool.run`` calls); for a rank that never answered, how long the
  pool waited for it.  The ranks run at once, inside the test: these times
  overlap each other and Hypothesis's ``execute:test``.

The controller calls :func:`recording` only when observability is on, so a
run without it pays one check per example.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from fuzzdist.compat import hypothesis_internals as _hypothesis_compat
from fuzzdist.errors import FuzzdistError

PREFIX = "fuzzdist:"
# How a rank ended the example: "raised" is followed by the exception's type ("raised ValueError"),
# "crash" by the cause where known ("crash (SIGSEGV)").
OUTCOMES = ("ok", "raised", "load_error", "crash", "timeout", "unfinished")


@contextlib.contextmanager
def recording(pool: Any, out: Any) -> Iterator[None]:
    """Record what the ranks did in ``out`` (a controller ``Outcome``) once the block concludes it,
    with the failure it raised, if any."""
    collected = time.monotonic()  # before any recovery: a hung rank ran until the pool stopped waiting
    try:
        yield
    except BaseException as failure:
        _record(pool, out, collected - out.started, failure)
        raise
    _record(pool, out, collected - out.started, None)


def failed(failure: BaseException) -> None:
    """Record ``failure``'s kind for the running example (for failures raised outside ``pool.run``:
    the driver plugin calls it for a PropertyFailure)."""
    if _hypothesis_compat.observability_enabled() and _in_example():
        _event("failure", type(failure).__name__)


def rank_outcomes(out: Any, failure: BaseException | None) -> dict[int, str]:
    """How each rank ended the example in ``out`` (one of :data:`OUTCOMES`, with detail)."""
    causes = getattr(failure, "causes", None) or {}
    outcomes: dict[int, str] = {}
    for rank in range(len(out.results)):
        if rank in out.dead:
            outcomes[rank] = f"crash ({causes[rank]})" if rank in causes else "crash"
        elif rank in out.errors:
            outcomes[rank] = "raised " + str(getattr(out.errors[rank], "type_name", "?")).rsplit(".", 1)[-1]
        elif rank in out.load_errors:
            outcomes[rank] = "load_error"
        elif rank in out.pending:  # still running when the pool stopped waiting
            outcomes[rank] = "unfinished" if out.dead else "timeout"
        else:
            outcomes[rank] = "ok"
    return outcomes


def _record(pool: Any, out: Any, waited: float, failure: BaseException | None) -> None:
    if not _in_example():
        return
    _event("world_size", pool.world_size)
    _event("backend", pool.backend)
    _event("device", pool.device)
    for rank, outcome in rank_outcomes(out, failure).items():
        _event(f"rank{rank}", outcome)
    if failure is not None and _is_fuzzdist_failure(failure):
        _event("failure", type(failure).__name__)
        diagnosis = getattr(failure, "diagnosis", None)
        if diagnosis is not None:
            _event("hang", diagnosis.kind.__name__)
    _hypothesis_compat.add_example_timing(rank_times(out, waited))


def rank_times(out: Any, waited: float) -> dict[str, float]:
    """Each rank's wall time in the example in ``out``, by timing name: as the rank measured it, or
    ``waited`` (how long the pool waited) for a rank that hung or died; none for one that never ran."""
    times: dict[str, float] = {}
    for rank in range(len(out.results)):
        if rank in out.elapsed:
            times[f"{PREFIX}rank{rank}"] = out.elapsed[rank]
        elif rank in out.pending or rank in out.dead:
            times[f"{PREFIX}rank{rank}"] = waited
    return times


def _is_fuzzdist_failure(failure: BaseException) -> bool:
    return isinstance(failure, FuzzdistError)


def _in_example() -> bool:
    from hypothesis import currently_in_test_context

    return currently_in_test_context()


def _event(name: str, value: str | int) -> None:
    from hypothesis import event

    event(PREFIX + name, value)
