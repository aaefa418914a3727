"""What a pool is, once: the driver's side of running one example on every rank.

:class:`Pool` is the protocol a test sees (``run``, ``world_size``,
``close``, a context manager).  :class:`Controller` implements it for both
transports: it pickles the call (with errors that say what to do), derives
the example's seed, records coverage, keeps the ranks' ``sys.path`` in step,
collects every rank's reply within the timeout (and a straggler grace once
one rank failed), and turns the outcome into results or a
:class:`~fuzzdist.errors.RankFailure`.

A transport only moves bytes.  It sends a message to every rank
(``_send``), files the replies that arrive within a bound (``_receive``),
reports dead ranks (``_crash``) and the stacks of hung ones (``_stacks``),
and then recovers or is spent (``_recover``).
"""

from __future__ import annotations

import hashlib
import pickle
import sys
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping, Set
from typing import Any, Protocol, runtime_checkable

from fuzzdist.compat import hypothesis_internals as _hypothesis_compat
from fuzzdist.errors import RESTARTED, CallError, RankCrash, RankError, RankTimeout
from fuzzdist.pool import hangs, messages
from fuzzdist.pool import input_coverage as _coverage
from fuzzdist.pool import line_coverage as _line_coverage
from fuzzdist.pool import observability as _observability
from fuzzdist.pool import remote as _remote
from fuzzdist.pool import signals as _signals
from fuzzdist.pool.rank import rank_output
from fuzzdist.pool.rank.rank_output import RankOutput
from fuzzdist.pool.rank.rank_state import RankState

DEFAULT_TIMEOUT = 30.0
MIN_TIMEOUT_S = 1.0  # below it a pool can't answer a passing example: its round trip and set-up take that
MAX_TIMEOUT_S = 7 * 86400.0  # a week: nothing hangs forever


def timeout_problem(text: str) -> tuple[float, str | None]:
    """``text`` as a per-example timeout a user asks for (``--timeout``, ``--fuzzdist-timeout``): the
    seconds, and what is wrong with them (None if nothing): not a number, not finite, below
    :data:`MIN_TIMEOUT_S` (every example would be a false hang) or above :data:`MAX_TIMEOUT_S`."""
    try:
        value = float(text)
    except ValueError:
        return 0.0, f"{text!r} is not a number of seconds"
    if not value > 0:
        return value, f"{text!r} must be more than 0 seconds"
    if value == float("inf"):
        return value, f"{text!r} is not a finite number of seconds: give one, e.g. 30"
    if value < MIN_TIMEOUT_S:
        return value, (
            f"{text!r} is below {MIN_TIMEOUT_S:g} second: no pool answers an example that fast (the "
            "ranks' round trip and the example's set-up take that), so every example would be a false "
            "hang; pass 1 or more"
        )
    if value > MAX_TIMEOUT_S:
        return value, f"{text!r} is more than a week: pass at most {MAX_TIMEOUT_S:g} seconds"
    return value, None


# While an example runs past FIRST_PROBE_S the pool reads the ranks' state (rank_state.py) to see
# whether they deadlocked, then again at doubling intervals up to MAX_PROBE_INTERVAL_S: an example
# that finishes sooner costs nothing.  A certain deadlock is declared once two readings
# CONFIRM_PROBE_S apart agree (ranks are read one after the other, not at one instant).  Whether a
# reading is certain does not depend on when it is taken, only how soon a deadlock is seen does:
# at 0.05/0.05 a deadlock is declared in about 0.15 s, restart included, against 0.3 s at 0.2/0.1,
# and a slow passing example pays nothing measurable for the extra probes (bench/hang_probes.py).
FIRST_PROBE_S = 0.05
MAX_PROBE_INTERVAL_S = 2.0
CONFIRM_PROBE_S = 0.05
# Each probe reads the ranks light first (their process groups' counters and their stacks: microseconds)
# and reads the flight recorder's records (torch's whole ring buffer as JSON: up to hundreds of ms on
# a loaded machine) only when a pending rank may be in a deadlock: a collective of its in flight, inside
# a torch.distributed call, or it can't say.  From FULL_READ_AFTER_S into an example every probe reads the
# records too, in case a deadlock hides from the counters (they count collectives, not p2p ops).
FULL_READ_AFTER_S = 1.0
# Readings of each rank kept per example: the last few tell a loop that doesn't end (hangs.py).
KEPT_READINGS = 8


@runtime_checkable
class Pool(Protocol):
    """A set of ranks in one process group that run each example together.

    Both :class:`~fuzzdist.RankPool` (spawned local processes) and
    :class:`~fuzzdist.pool.TorchrunPool` (torchrun's processes) are pools.
    """

    world_size: int
    backend: str
    device: str
    timeout: float

    def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``fn(ctx, *args, **kwargs)`` on every rank at once; return the results in rank order."""
        ...

    def start(self) -> Pool:
        """Block until every rank is ready; return the pool."""
        ...

    def close(self) -> None:
        """Stop the ranks (bounded)."""
        ...

    def __enter__(self) -> Pool: ...

    def __exit__(self, *exc_info: object) -> None: ...


class Controller(ABC):
    """The driver's half of a pool, shared by the transports (see the module docstring)."""

    aftermath = RESTARTED  # what a failure's message says became of the pool

    def __init__(
        self, world_size: int, backend: str, device: str, timeout: float, straggler_grace: float | None
    ) -> None:
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self.timeout = float(timeout)
        self.straggler_grace = min(self.timeout, 5.0) if straggler_grace is None else float(straggler_grace)
        self.generation = 0  # how many times rank processes were started
        self.examples_run = 0
        self._sent_sys_path: list[str] | None = None  # the sys.path the ranks have

    # -- the protocol -----------------------------------------------------------------

    def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``fn(ctx, *args, **kwargs)`` on every rank at once; return the results in rank order.

        ``fn`` must be a top-level function of an importable module and the
        arguments plain picklable values.  Raises :class:`~fuzzdist.RankError`,
        :class:`~fuzzdist.RankTimeout` or :class:`~fuzzdist.RankCrash` if any
        rank fails.
        """
        self._check_usable()
        _signals.raise_swallowed()  # before the example starts, not half-way through
        payload = pickle_call(fn, args, kwargs)
        _coverage.record(args, kwargs)
        return self._run_payload(payload, derive_seed(payload))

    def start(self) -> Controller:
        """Block until every rank is ready (``run`` does this itself); return the pool."""
        return self

    @abstractmethod
    def close(self) -> None:
        """Stop the ranks (bounded)."""

    def __enter__(self) -> Controller:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- one example --------------------------------------------------------------------

    def _run_payload(self, payload: bytes, seed: int) -> list[Any]:
        self._ensure_ready()
        self.examples_run += 1
        seq = self.examples_run
        sys_path = None
        if sys.path != self._sent_sys_path:  # new test directories since the ranks last heard
            sys_path = self._sent_sys_path = list(sys.path)
        self._send(seq, seed, payload, messages.run(seq, seed, payload, sys_path))
        out = self._collect(seq)
        if not _hypothesis_compat.observability_enabled():  # the one check per run when it is off
            return self._conclude(seq, out)
        with _observability.recording(self, out):  # what the ranks did, for Hypothesis's observations
            return self._conclude(seq, out)

    def _collect(self, seq: int) -> Outcome:
        """Every rank's reply, until the timeout, a death, a certain deadlock, or the straggler grace
        after a failure."""
        out = Outcome(seq, self.world_size, self.straggler_grace)
        probes = _Probes(self, out)
        _signals.keep_swallowed_interrupts()  # pytest may have put its hook in front since the last example
        while out.pending and not out.dead:
            _signals.raise_swallowed()  # a SIGINT/SIGTERM whose exception Python swallowed stops us here
            now = time.monotonic()
            end = min(out.deadline, out.grace_deadline)
            if now >= end:
                break
            probes.note_answers(now)
            if now >= probes.next_at:
                if probes.deadlocked():
                    break
                continue
            if not self._receive(out, min(end, probes.next_at) - now):
                break
        return out

    def _conclude(self, seq: int, out: Outcome) -> list[Any]:
        """The results, or the failure the outcome amounts to (after the transport recovered)."""
        if out.dead:
            crash = self._crash(out.dead)
            if out.pending - crash.ranks_set():  # a survivor may just be raising (its peer's socket closed)
                self._receive(out, CONFIRM_PROBE_S)
            survivors = out.pending - crash.ranks_set()
            if survivors:  # they may wait for the dead rank: say where (before the restart kills them)
                states = self._snapshots(out.seq, set(range(self.world_size)) - crash.ranks_set(), with_stack=False)
                diagnosis = hangs.diagnose(states, out.finished(), self.world_size, dead=crash.causes)
                if diagnosis.deadlock:  # only a survivor seen waiting for the dead rank is worth a line
                    crash.explain_survivors(diagnosis)
            self._recover(crash)
            raise crash
        if out.pending:
            diagnosis, stacks = self._explain(out)
            timeout = RankTimeout(
                sorted(out.pending),
                self.timeout,
                stacks,
                self.aftermath,
                diagnosis,
                deadlock=out.deadlock,
                waited=time.monotonic() - out.started,
            )
            try:
                if out.errors:
                    _raise_rank_error(
                        out.errors,
                        stragglers=out.pending,
                        straggler_stacks=stacks,
                        aftermath=self.aftermath,
                        diagnosis=diagnosis,
                        outputs=out.outputs,
                    )
                if not out.load_errors:
                    origin = diagnosis.origin()
                    timeout.__context__ = origin  # Hypothesis reads __context__ (see errors.py)
                    raise timeout from origin
            except BaseException as failure:
                self._recover(failure)  # the hung ranks hold the group
                raise
            self._recover(timeout)  # raised as a load error below
        else:
            if out.errors and len(out.errors) < self.world_size:
                # Some ranks raised, the others returned: a rank may have raised before a collective its peers
                # completed without it (a torch bug can make a rank finish one alone: torch 2.6.0's
                # zero-byte all-gather in DTensor's full_tensor), and gloo pairs collectives by their count
                # on the group, so every later example on the default group would hang.  Fresh ranks can't.
                out.recycle.append(
                    f"ranks {sorted(out.errors)} raised while the others returned: their "
                    "collectives on the default group may be out of step"
                )
            if out.recycle:
                self._recycle(out.recycle)
        if out.load_errors:
            _raise_load_error(out.load_errors)
        if out.errors:
            _raise_rank_error(out.errors, outputs=out.outputs)
        rank_output.report(out.outputs)
        return out.results

    def _explain(self, out: Outcome) -> tuple[hangs.Diagnosis, dict[int, str]]:
        """Why the pending ranks did not finish, and their stacks (faulthandler's where a rank can't say)."""
        # The finished ranks too: what they did in the example tells what the others wait for.
        states = self._snapshots(out.seq, set(range(self.world_size)), with_stack=True)
        diagnosis = hangs.diagnose(states, out.finished(), self.world_size, earlier=out.readings)
        stacks = {
            r: "\n".join(filter(None, (s.stack, s.threads)))
            for r, s in states.items()
            if s is not None and s.stack and r in out.pending
        }
        silent = set(out.pending) - set(stacks)
        if silent:  # the rank's watch thread did not answer (the GIL is held?): ask faulthandler
            stacks.update(self._stacks(out.seq, silent))
        return diagnosis, stacks

    # -- what a transport provides ----------------------------------------------------

    def _check_usable(self) -> None:  # noqa: B027 - optional hook
        """Raise if the pool can't take another example at all (before the call is pickled)."""

    def _ensure_ready(self) -> None:  # noqa: B027 - optional hook
        """Make sure every rank is up before an example is sent."""

    @abstractmethod
    def _send(self, seq: int, seed: int, payload: bytes, message: bytes) -> None:
        """Hand ``message`` (a :func:`messages.run`) to every rank; don't wait for replies."""

    @abstractmethod
    def _receive(self, out: Outcome, seconds: float) -> bool:
        """File the replies (``out.take``) and deaths (``out.died``) seen within ``seconds``.

        False ends the collection at once (the transport knows no more will come).
        """

    @abstractmethod
    def _snapshots(
        self, seq: int, ranks: Set[int], with_stack: bool, records: bool = True
    ) -> dict[int, RankState | None]:
        """Each rank's :class:`~fuzzdist.pool.rank.rank_state.RankState` in example ``seq``, read without
        stopping it; None for a rank that did not answer within a short bound.  ``records=False``: light
        snapshots, the flight recorder's records left unread (``rank_state.py``)."""

    @abstractmethod
    def _stacks(self, seq: int, ranks: Set[int]) -> dict[int, str]:
        """The Python stacks (all threads) of ranks that don't answer a snapshot, from faulthandler (bounded)."""

    @abstractmethod
    def _crash(self, dead: Set[int]) -> RankCrash:
        """The failure for ranks that died during the example."""

    @abstractmethod
    def _recover(self, failure: BaseException) -> None:
        """After ``failure`` (a crash, or ranks still running): restart the ranks, or be spent."""

    def _recycle(self, reasons: list[str]) -> None:  # noqa: B027 - optional hook
        """A rank asked to be replaced before the next example (``ctx.request_recycle``)."""


class Outcome:
    """What the ranks answered for example ``seq``: filed as replies arrive, by message name."""

    def __init__(self, seq: int, world_size: int, straggler_grace: float) -> None:
        self.seq = seq
        self.results: list[Any] = [None] * world_size
        self.errors: dict[int, _remote.RemoteRecord] = {}
        self.load_errors: dict[int, _remote.RemoteRecord] = {}
        self.dead: set[int] = set()
        self.pending: set[int] = set(range(world_size))
        self.recycle: list[str] = []
        self.outputs: dict[int, RankOutput] = {}  # what ranks wrote during the example, where they did
        self.elapsed: dict[int, float] = {}  # each answering rank's wall time in the example, as it measured it
        self.started = time.monotonic()
        self.deadline = float("inf")  # the controller sets the timeout's
        self.grace_deadline = float("inf")  # set once a rank failed: the others get straggler_grace
        self.deadlock = False  # set when the ranks were found deadlocked before any deadline
        self.readings: dict[int, deque[RankState]] = {}  # each rank's probe readings, oldest first
        self._straggler_grace = straggler_grace
        self._outcomes: dict[int, str] = {}

    def finished(self) -> dict[int, str]:
        """How each rank that answered ended the example: 'returned' or 'raised <Type>'."""
        return dict(self._outcomes)

    def keep_readings(self, states: Mapping[int, RankState | None]) -> None:
        """File the probe readings of the ranks still running this example (the last KEPT_READINGS each)."""
        for r, s in states.items():
            if s is not None and not s.finished and s.seq == self.seq:
                self.readings.setdefault(r, deque(maxlen=KEPT_READINGS)).append(s)

    def take(self, rank: int, message: messages.Message) -> None:
        """File ``rank``'s reply."""
        message = _line_coverage.absorb(message)  # --cover: the lines it reached go to the driver's ledger
        messages.dispatch(self, message, rank)

    def died(self, rank: int) -> None:
        self.dead.add(rank)

    def on_ok(
        self, rank: int, seq: int, result: Any, recycle: list[str], output: Any = None, elapsed: float | None = None
    ) -> None:
        self._answered(rank, seq, recycle, output, elapsed)
        self.results[rank] = result
        self._outcomes[rank] = "returned"

    def on_err(
        self,
        rank: int,
        seq: int,
        error: _remote.RemoteRecord,
        recycle: list[str],
        output: Any = None,
        elapsed: float | None = None,
    ) -> None:
        self._answered(rank, seq, recycle, output, elapsed)
        self.errors[rank] = error
        self._outcomes[rank] = f"raised {str(getattr(error, 'type_name', '?')).rsplit('.', 1)[-1]}"
        self._failed()

    def on_load_error(self, rank: int, seq: int, error: _remote.RemoteRecord, recycle: list[str]) -> None:
        self._answered(rank, seq, recycle)
        self.load_errors[rank] = error
        self._outcomes[rank] = "could not load the call"
        self._failed()

    def _answered(
        self, rank: int, seq: int, recycle: list[str], output: Any = None, elapsed: float | None = None
    ) -> None:
        if seq != self.seq:
            raise RuntimeError(f"fuzzdist bug: rank {rank} answered example {seq}, expected {self.seq}")
        self.pending.discard(rank)
        self.recycle.extend(recycle)
        if output is not None:
            self.outputs[rank] = output
        if elapsed is not None:
            self.elapsed[rank] = elapsed

    def _failed(self) -> None:
        # The others may be stuck in a collective the failed rank never joined.
        self.grace_deadline = min(self.grace_deadline, time.monotonic() + self._straggler_grace)


class _Probes:
    """When to read the pending ranks' state during an example, and whether they deadlocked."""

    def __init__(self, controller: Controller, out: Outcome) -> None:
        self._controller = controller
        self._out = out
        out.deadline = out.started + controller.timeout
        self._interval = min(FIRST_PROBE_S, controller.timeout / 4)
        self.next_at = out.started + self._interval
        self._suspect: dict[int, Any] | None = None  # the last reading, if it showed a certain deadlock
        self._pending = len(out.pending)

    def note_answers(self, now: float) -> None:
        """A rank finished while others still run: they may wait for it in vain, so look soon."""
        pending = len(self._out.pending)
        if pending != self._pending:
            self._pending = pending
            self.next_at = min(self.next_at, now + CONFIRM_PROBE_S)

    def deadlocked(self) -> bool:
        """Read the pending ranks; True once two readings in a row show the same certain deadlock."""
        out, controller = self._out, self._controller
        ranks = set(range(controller.world_size))
        light = controller._snapshots(out.seq, ranks, with_stack=False, records=False)
        suspect = any((s := light.get(r)) is None or s.may_deadlock() for r in out.pending)
        if not suspect and time.monotonic() - out.started < FULL_READ_AFTER_S:
            out.keep_readings(light)
            self._suspect = None  # no pending rank has a collective in flight: no deadlock to see yet
            self._back_off(time.monotonic())
            return False
        states = controller._snapshots(out.seq, ranks, with_stack=False)
        out.keep_readings(states)  # one reading per probe: the full one stands for the light one
        now = time.monotonic()
        reading = {r: None if s is None else s.progress() for r, s in states.items()}
        # A pending rank that says it finished has answered meanwhile: read again later.
        certain = (
            all((s := states.get(r)) is not None and not s.finished for r in out.pending)
            and hangs.diagnose(states, out.finished(), controller.world_size).deadlock
        )
        if certain and reading == self._suspect:
            out.deadlock = True
            return True
        self._suspect = reading if certain else None
        if certain:
            self.next_at = now + CONFIRM_PROBE_S
        else:
            self._back_off(now)
        return False

    def _back_off(self, now: float) -> None:
        self._interval = min(self._interval * 2, MAX_PROBE_INTERVAL_S)
        self.next_at = now + self._interval


def decode_reply(data: bytes, rank: int, seq: int) -> messages.Message:
    """A rank's message; a reply the driver can't unpickle becomes that rank's error, not a broken pool.

    (torch 2.13 can't unpickle a uint16 tensor, for one.)
    """
    try:
        return messages.load(data)
    except Exception as exc:  # noqa: BLE001 - anything unpickling raises becomes the rank's CallError
        error = CallError(
            f"rank {rank}'s reply can't be unpickled in the driver ({type(exc).__name__}: "
            f"{exc}). Return plain values; send tensors of unusual dtypes as bytes or "
            "a supported dtype."
        )
        return messages.load(messages.err(seq, _remote.capture(error), []))


def pickle_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """``(fn, args, kwargs)`` pickled for the ranks, or a :class:`~fuzzdist.errors.CallError` saying why not."""
    if not callable(fn):
        raise CallError(f"pool.run needs a callable fn(ctx, ...), got {fn!r}")
    qualname = getattr(fn, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise CallError(
            f"{qualname} can't be sent to the rank processes: lambdas and nested functions can't be "
            "imported there. Define fn at the top level of a module (e.g. your test file)."
        )
    try:
        return pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise CallError(
            f"the call to {qualname or fn!r} can't be pickled for the rank processes ({exc}). "
            "fn must be a top-level function and its arguments plain picklable values: "
            "send drawn specs and seeds, and build large tensors on the ranks."
        ) from exc


def derive_seed(payload: bytes) -> int:
    """A seed that depends only on the example (the function and its arguments).

    Saved examples replay with the seeds they failed with: don't change this.
    """
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little") >> 1


def _raise_rank_error(
    records: Mapping[int, _remote.RemoteRecord],
    stragglers: Set[int] = frozenset(),
    straggler_stacks: Mapping[int, str] | None = None,
    aftermath: str = RESTARTED,
    diagnosis: hangs.Diagnosis | None = None,
    outputs: Mapping[int, RankOutput] | None = None,
) -> None:
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
        aftermath=aftermath,
        diagnosis=diagnosis,
        outputs=outputs,
    )
    # Chained to the lowest failing rank's exception, rebuilt at its remote site,
    # so Hypothesis tells different remote bugs apart.  Hypothesis reads
    # __context__, which `raise ... from` sets only inside an except block.
    primary = exceptions[min(exceptions)]
    error.__context__ = primary
    raise error from primary


def _raise_load_error(records: Mapping[int, _remote.RemoteRecord]) -> None:
    rank = min(records)
    record = records[rank]
    raise CallError(
        f"rank {rank} could not load the function or its arguments "
        f"({record.type_name.rsplit('.', 1)[-1]}: {record.message}). fn must be a top-level "
        "function of a module the rank processes can import (not one defined in an "
        "interactive session or a module that exists only in the driver)."
    )
