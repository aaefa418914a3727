"""Every error fuzzdist raises, in one family: each is a :class:`FuzzdistError`.

As in Hypothesis's ``errors.py``, one base and built-in mixins: where
fuzzdist used to raise a plain ``TypeError``/``ValueError``/``RuntimeError``,
its error is that built-in too (``CallError(FuzzdistError, TypeError)``), so
``except TypeError`` keeps working; a failure found in an example is also an
``AssertionError`` (:class:`RankFailure`), so pytest and Hypothesis treat it
as a test failure.

Outside the family, by design:

* :class:`PoolGone` is a ``BaseException`` so that Hypothesis does not try
  to shrink through it (it ends the campaign), and a class can't be both
  that and an ``Exception`` subclass such as ``FuzzdistError``: it would be
  caught by every ``except Exception``.  Like Hypothesis's own control-flow
  exceptions (``StopTest``), it stands alone.  So do
  :class:`CampaignInterrupt` and its kinds
  (``BudgetSpent``, ``Terminated``): ``KeyboardInterrupt`` subclasses, so that
  Hypothesis ends the campaign without saving the example in flight.
* ``fuzzdist.pool.remote.RemoteException`` stands in for an exception the code
  under test raised on a rank: it is the user's error, not fuzzdist's.
* ``fuzzdist.known_bugs.catalogue.CatalogueError`` and
  ``fuzzdist.known_bugs.catalogue_pages.PageError`` (a malformed findings
  catalogue, a findings page without its markers) are ``ValueError`` s of
  their own: the catalogue module imports the standard library only, so that
  the scripts in ``docs/findings/`` load it by path without torch or fuzzdist.
* Bugs in fuzzdist itself ("fuzzdist bug: ...") stay ``RuntimeError``.

Hypothesis tells bugs apart by exception type and raising location (and the
same for the exception's ``__context__``).  A :class:`RankError` is always
raised from the same line of the pool, so on its own every remote bug would
look like one bug.  It is therefore raised *from* a rebuilt copy of the
remote exception whose traceback ends at the remote raising site (see
``fuzzdist/pool/remote.py``): two different remote bugs give two different
``__context__`` origins, hence two distinct failures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import hypothesis.errors

from fuzzdist.problems import Problem, flatten


class FuzzdistError(Exception):
    """Base class of every error fuzzdist raises itself (see the module docstring for the exceptions)."""


class InvalidArgument(FuzzdistError, ValueError):
    """fuzzdist was called with an argument it can't work with (a world size, timeout, device...).

    A ``ValueError`` too: that is what these checks raised before the family existed.
    """


class InvalidStrategyArgument(FuzzdistError, hypothesis.errors.InvalidArgument):
    """A fuzzdist strategy was given arguments it can't draw from (a world size below 1, no dtype left...).

    Hypothesis's own ``InvalidArgument`` too (a ``TypeError``), as every Hypothesis strategy raises.
    """


class InvalidType(FuzzdistError, TypeError):
    """An argument, or an object fuzzdist was handed back, is not of the type it needs
    (a dtype that is not a ``torch.dtype``, a factory that returns no ProcessGroup).

    A ``TypeError`` too, as before the family existed.
    """


class InvalidState(FuzzdistError, RuntimeError):
    """The object can't do that now: a closed pool, a torchrun API outside torchrun, rank 0's API on rank 1."""


class CallError(FuzzdistError, TypeError):
    """A call can't travel between the driver and the ranks.

    ``fn`` is not a top-level importable function, its arguments or its
    return value don't pickle, or a rank could not load it.  A ``TypeError``
    too, as before the family existed.
    """


class CapabilityError(FuzzdistError):
    """This machine cannot run what was asked (no GPU, too few GPUs, missing feature).

    The pytest plugin turns it into a skip with the same message.
    """


class PoolStartupError(FuzzdistError):
    """The rank processes could not be started or could not form a process group."""


class PoolGone(BaseException):
    """The pool can't run examples any more: the torchrun group (a rank crashed, hung or the agent
    stopped it), or a RankPool whose ranks could not be restarted (``.failure`` its PoolStartupError).

    A BaseException so Hypothesis doesn't try to shrink through it, nor save it
    as the property's failure: the failure that broke the pool, if any, was
    already raised in its own example and saved to the database.  Not a
    :class:`FuzzdistError` for that reason (see the module docstring).
    """

    def __init__(self, failure: BaseException, message: str | None = None) -> None:
        super().__init__(message or f"the torchrun group is spent after: {(str(failure).splitlines() or [''])[0]}")
        self.failure = failure


class RankFailure(FuzzdistError, AssertionError):
    """An example failed on one or more ranks.

    Subclasses :class:`AssertionError` so that pytest and Hypothesis treat it
    as a test failure.  ``ranks`` lists the ranks involved, in order.
    """

    def __init__(self, message: str, ranks: Sequence[int]) -> None:
        super().__init__(message)
        self.ranks: list[int] = sorted(ranks)


class PropertyFailure(FuzzdistError, AssertionError):
    """A property does not hold for an example: the message says what each rank saw wrong.

    Raised by the checkers of :mod:`fuzzdist.properties`.  ``results`` holds what the rank
    function returned on each rank, in rank order, for tests that look closer than the
    message (the planted-bug tests do); :attr:`problems` the
    :class:`~fuzzdist.problems.Problem` records, which known-bug predicates read: those among the
    results, or, where the check found them in the driver, ``problems``.
    """

    def __init__(self, message: str, results: Sequence[Any] = (), problems: Sequence[Problem] | None = None) -> None:
        super().__init__(message)
        self.results: list[Any] = list(results)
        self._problems = None if problems is None else list(problems)

    @property
    def problems(self) -> list[Problem]:
        """Every problem found: the driver's, or those the ranks reported, in rank order (a rank's result
        is a Problem, a list of them, or None)."""
        return flatten(self.results) if self._problems is None else self._problems


# What became of the pool after a failure, in the failure's message: a spawned pool restarts its
# ranks; a torchrun group is spent (fuzzdist.pool.torchrun says it instead).
RESTARTED = "the pool was restarted"


class RankError(RankFailure):
    """``fn`` raised on one or more ranks.

    ``tracebacks[r]`` is rank r's formatted remote traceback, ``exc_types[r]``
    the qualified name of the type it raised and ``exceptions[r]`` the
    exception itself, rebuilt in the driver where it could be unpickled.
    ``stragglers`` are ranks that had not finished when the pool gave up
    waiting for them (usually blocked in a collective a failed rank never
    joined); ``straggler_stacks`` holds their Python stacks and
    ``diagnosis`` (a :class:`fuzzdist.pool.hangs.Diagnosis`, or None) where they wait.
    ``outputs[r]`` is what rank r wrote during the example (warnings, stderr),
    a :class:`fuzzdist.pool.rank.rank_output.RankOutput`, where it wrote anything.
    """

    def __init__(
        self,
        ranks: Sequence[int],
        tracebacks: Mapping[int, str],
        exc_types: Mapping[int, str],
        exceptions: Mapping[int, BaseException],
        stragglers: Sequence[int] = (),
        straggler_stacks: Mapping[int, str] | None = None,
        aftermath: str = RESTARTED,
        diagnosis: Any = None,
        outputs: Mapping[int, Any] | None = None,
    ) -> None:
        self.diagnosis = diagnosis
        self.outputs = dict(outputs or {})
        self.tracebacks = dict(tracebacks)
        self.exc_types = dict(exc_types)
        self.exceptions = dict(exceptions)
        self.stragglers = sorted(stragglers)
        self.straggler_stacks = dict(straggler_stacks or {})
        ranks = sorted(ranks)
        head = ", ".join(f"rank {r}: {_first_line(exceptions[r])}" for r in ranks)
        parts = [f"{_plural(ranks)} raised ({head})"]
        for r in ranks:
            parts.append(f"\n--- rank {r} traceback ---\n{tracebacks[r].rstrip()}")
        for r in sorted(self.outputs):  # warnings and output the ranks wrote: they may be the clue
            parts.append(f"\n--- rank {r} wrote during the example ---\n{self.outputs[r].format()}")
        if self.stragglers:
            why = (
                f": {diagnosis.summary}"
                if diagnosis is not None
                else " (probably waiting in a collective the failed rank never joined)"
            )
            parts.append(f"\n{_plural(self.stragglers)} still running after the failure{why}; {aftermath}.")
            parts.extend(_rank_sections(self.stragglers, diagnosis, self.straggler_stacks))
        super().__init__("\n".join(parts), ranks)


class RankTimeout(RankFailure):
    """The ranks did not finish the example: they hung past the pool's timeout, or deadlocked.

    ``ranks`` are the ranks still inside ``fn``; ``stacks[r]`` is rank r's
    stack when fuzzdist gave up (the rank function down, fuzzdist's own
    frames and threads left out).  ``diagnosis`` (a
    :class:`fuzzdist.pool.hangs.Diagnosis`, or None) says why: where each rank
    stands in the example's collectives and where they disagree.
    ``deadlock`` is True when fuzzdist declared the hang before the timeout
    because nothing could ever complete (every stuck rank waits in a
    collective that a peer skipped or called differently).

    Raised *from* a :class:`Hang` of the diagnosed kind, raised at the stuck
    rank's own line, so Hypothesis keeps two different hangs apart.
    """

    def __init__(
        self,
        ranks: Sequence[int],
        timeout: float,
        stacks: Mapping[int, str],
        aftermath: str = RESTARTED,
        diagnosis: Any = None,
        deadlock: bool = False,
        waited: float | None = None,
    ) -> None:
        self.timeout = timeout
        self.stacks = dict(stacks)
        self.diagnosis = diagnosis
        self.deadlock = deadlock
        if deadlock:
            head = (
                f"deadlock: {diagnosis.summary}. Declared after {waited or 0:.1f}s, without waiting for the "
                f"{timeout:g}s timeout: every stuck rank waits for a collective that can never complete; "
                f"{aftermath}."
            )
        else:
            head = (
                f"{_plural(ranks)} still running after the {timeout:g}s timeout; {aftermath}."
                + (f" Why: {diagnosis.summary}." if diagnosis is not None else "")
                + (
                    " Raise the timeout (RankPool(timeout=...) or --fuzzdist-timeout) if the example is just slow."
                    if diagnosis is None or diagnosis.may_be_slow
                    else ""
                )
            )
        parts = [head, *_rank_sections(sorted(ranks), diagnosis, self.stacks)]
        super().__init__("\n".join(parts), ranks)


class Hang(FuzzdistError):
    """Why the ranks did not finish: the cause a :class:`RankTimeout` is raised from.

    Its traceback ends at the first stuck rank's own line (like a rebuilt
    remote exception), and each kind is its own class, so Hypothesis tells
    a deadlock at one line from a slow example or a deadlock at another.
    """


class CollectiveMismatch(Hang):
    """Ranks wait in different collectives at the same step (op, shape, dtype or root differ)."""


class MissedCollective(Hang):
    """A rank waits in a collective that a peer never entered (it skipped it, or finished the example)."""


class StuckCollective(Hang):
    """Every rank entered the same collective and it does not complete (a backend hang, or just slow)."""


class PendingWork(Hang):
    """A rank waits on a Work that no collective in flight will complete."""


class SlowExample(Hang):
    """The ranks were running their own code, not waiting on each other: the example is slow (or spins)."""


class EndlessLoop(Hang):
    """A rank was caught going round the same loop of its own code at every reading, using the CPU and
    waiting on nobody: a loop that doesn't end, most likely (a longer timeout would not help)."""


class UnexplainedHang(Hang):
    """The ranks could not be read (no flight recorder, no answer): only their stacks are known."""


class RankCrash(RankFailure):
    """A rank process died during the example.

    ``exit_codes[r]`` is rank r's exit code (negative: killed by a signal),
    ``causes[r]`` a readable form ("SIGSEGV", "exit code 3") and
    ``stacks[r]`` the stack faulthandler wrote on a fatal signal, if any, and
    ``last_output[r]`` the end of what the rank wrote (its stderr), where it was captured.
    ``diagnosis`` (a :class:`fuzzdist.pool.hangs.Diagnosis`, or None) says where
    the ranks that outlived the crash were waiting.
    """

    def __init__(
        self,
        ranks: Sequence[int],
        exit_codes: Mapping[int, int],
        stacks: Mapping[int, str],
        aftermath: str = RESTARTED,
        last_output: Mapping[int, str] | None = None,
    ) -> None:
        self.last_output = {r: text for r, text in (last_output or {}).items() if text}
        self.exit_codes = dict(exit_codes)
        self.causes = {r: describe_exit(code) for r, code in self.exit_codes.items()}
        self.stacks = dict(stacks)
        head = ", ".join(f"rank {r} ({self.causes[r]})" for r in sorted(ranks))
        parts = [f"rank process died: {head}; {aftermath}."]
        self.diagnosis: Any = None
        for r in sorted(ranks):
            if self.last_output.get(r):  # an abort's reason is often only on stderr (gloo's enforce fail)
                parts.append(f"\n--- rank {r}'s last output ---\n{self.last_output[r]}")
            if self.stacks.get(r):
                parts.append(f"\n--- rank {r} stack at the fatal signal ---\n{self.stacks[r].rstrip()}")
        super().__init__("\n".join(parts), ranks)

    def ranks_set(self) -> set[int]:
        return set(self.ranks)

    def explain_survivors(self, diagnosis: Any) -> None:
        """Add where the ranks that outlived the crash were waiting (a :class:`fuzzdist.pool.hangs.Diagnosis`)."""
        self.diagnosis = diagnosis
        lines = [f"The other ranks were still running: {diagnosis.summary}."]
        lines += [f"  rank {r}: {where}" for r, where in sorted(diagnosis.ranks.items())]
        self.args = (f"{self.args[0]}\n\n" + "\n".join(lines),)


# Errors of the campaign, the CLI, check-pg and the toolkit: defined here, raised there, so that
# every error fuzzdist raises is in this module.


class JobsError(InvalidArgument):
    """``--jobs`` can't be used as asked; the message says what to do (a ``ValueError`` too)."""


class TargetError(FuzzdistError):
    """A target names nothing runnable; the message says what to do."""


class DatabaseError(FuzzdistError):
    """The database can't be used; the message says what to do (the CLI prints it, exit 2)."""


class DatabaseUnreadable(FuzzdistError):
    """A read of the example database failed during a campaign (``.error``, what the backend raised), perhaps
    inside Hypothesis's engine, which reads it at the start of every run and lets what it raises out as is.
    Its own type, so that the campaign says it as its error instead of filing it as the property's failure."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class SharingError(FuzzdistError, RuntimeError):
    """``share_tensor`` failed on some rank. Every rank raises it, so none is left in a later collective."""


class ScheduledWorkFailure(FuzzdistError, RuntimeError):
    """The schedule made this work fail ("fail" outcome)."""


class ScheduledWorkDropped(FuzzdistError, RuntimeError):
    """The schedule dropped this work ("drop" outcome): its result was discarded."""


class ReorderTimeout(FuzzdistError, RuntimeError):
    """A wait on a held work did not return within its bound."""


class UsageError(FuzzdistError):
    """Bad input a command found after parsing: printed as one line, exit code 2."""


class CallRaised(FuzzdistError, RuntimeError):
    """A functional collective raised on a rank: ``problem`` (a :attr:`~fuzzdist.problems.Kind.RAISED`
    :class:`~fuzzdist.problems.Problem`) names the call and what it raised, and so does the message."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problem,))


class FactoryError(FuzzdistError, ValueError):
    """The factory reference can't be resolved to a callable."""


class ConformanceFailure(FuzzdistError, AssertionError):
    """An example where the ProcessGroup broke the c10d contract (the message says how; ``problems``
    holds each :class:`~fuzzdist.problems.Problem` found, which known-bug predicates read)."""

    def __init__(self, message: str, problems: Sequence[Problem] = ()) -> None:
        super().__init__(message)
        self.problems: list[Problem] = list(problems)


class BadReport(InvalidArgument):
    """The JSON is not a fuzzdist campaign report this version can read; the message says why."""


class ForgedMessage(FuzzdistError, RuntimeError):
    """A value in torchrun's store that is not signed with the run's secret: refused, never unpickled
    (:mod:`fuzzdist.pool.torchrun_auth`)."""


# The campaign's control flow: KeyboardInterrupts, outside the family (see above).


class CampaignInterrupt(KeyboardInterrupt):
    """Ends the run at once.  A KeyboardInterrupt so that Hypothesis does not save the example in flight."""


class BudgetSpent(CampaignInterrupt):
    """The time budget is spent; raised by the example wrapper before the next example runs."""


class PoolLost(CampaignInterrupt):
    """A :class:`PoolGone` raised inside a Hypothesis example, carried out of it (``.gone``).

    Hypothesis saves the example in flight for any BaseException but a
    KeyboardInterrupt, so the fuzzdist plugin raises this in its place around
    each example, and ``.gone`` again once out of Hypothesis: a pool that
    can't run examples is never stored as a failure of the property.
    """

    def __init__(self, gone: PoolGone) -> None:
        super().__init__(str(gone))
        self.gone = gone


class Terminated(CampaignInterrupt):
    """SIGINT or SIGTERM arrived (raised by the CLI's signal handler)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def describe_exit(code: int) -> str:
    """'SIGSEGV' for a death by signal 11, 'exit code 3' for ``os._exit(3)``."""
    import signal

    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    name = getattr(exc, "remote_type", None) or type(exc).__name__
    return f"{name}: {text[0]}" if text else name


def _rank_sections(ranks: Sequence[int], diagnosis: Any, stacks: Mapping[int, str]) -> list[str]:
    """Each rank's part of a hang report, in the order given: a header with where the diagnosis
    places the rank, the diagnosis's details for it, then its stack."""
    parts: list[str] = []
    for r in ranks:
        where = diagnosis.ranks.get(r, "") if diagnosis is not None else ""
        parts.append(f"\n--- rank {r}{': ' + where if where else ''} ---")
        if diagnosis is not None and diagnosis.details.get(r):
            parts.append(diagnosis.details[r])
        parts.append(stacks.get(r, "(no stack captured)").rstrip())
    return parts


def _plural(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks))
