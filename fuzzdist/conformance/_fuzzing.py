"""Fuzzing one check with Hypothesis, within its share of the session's time and examples.

:meth:`Fuzzer.fuzz` draws a world size and an example for each Hypothesis
test case and hands them to the check's ``execute``, which appends a
``Failure`` and raises when the example does not conform; the failure
Hypothesis shrank and raised last is the check's report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Verbosity, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as Settings
from hypothesis import strategies as st

from fuzzdist.compat.hypothesis_internals import set_extra_digest
from fuzzdist.conformance._options import CheckOptions
from fuzzdist.conformance._report import Failure, OpReport, Unsupported, failure_text

_UNLIMITED_EXAMPLES = 1_000_000  # with a duration and no max_examples: the clock decides
# How long shrinking one failure may take: with a duration, the check's share again, at least
# SHRINK_MIN_S; without, SHRINK_LIMIT_S.  Then the smallest failure so far is reported, with a note.
SHRINK_MIN_S = 10.0
SHRINK_LIMIT_S = 300.0
# With a duration, the checks get at least this fraction of it, however long building and probing the
# group took (probes count against the budget, but never take all of it).
MIN_FUZZ_SHARE = 0.5


class _OutOfTime(BaseException):
    """The op's share of the duration is spent (a BaseException, so Hypothesis lets it through)."""


class _Refused(BaseException):
    """A check hit an operation the group does not implement (raised by its ``execute``): the check
    is reported unsupported, not failed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Fuzzer:
    """Runs each check's examples under Hypothesis for the group ``ref``, with ``options``' settings,
    seed and budget: ``duration`` (counted from ``started``) is shared out between the checks as
    each starts (:meth:`start_check`)."""

    def __init__(self, ref: str, options: CheckOptions, started: float) -> None:
        self.ref = ref
        self.options = options
        self.deadline = None if options.duration is None else started + float(options.duration)
        self._check_deadline: float | None = None

    def probed(self) -> float:
        """Probing is over: the seconds the checks get.  At least ``MIN_FUZZ_SHARE`` of the duration,
        even where building and probing the group took more of it (the run then ends later than the
        duration, by at most what probing took beyond the rest)."""
        if self.deadline is None or self.options.duration is None:
            return 0.0
        now = time.monotonic()
        self.deadline = max(self.deadline, now + MIN_FUZZ_SHARE * float(self.options.duration))
        return self.deadline - now

    def start_check(self, checks_left: int) -> None:
        """The next check gets an equal share of the time left with the ``checks_left`` still to run."""
        self._check_deadline = None
        if self.deadline is not None:
            now = time.monotonic()
            self._check_deadline = now + max(0.0, self.deadline - now) / max(1, checks_left)

    def hypothesis_settings(self) -> Settings:
        """The settings each check runs under: the options' settings (else the profile's), quiet
        unless verbose, no deadline (the pool's timeout is the deadline)."""
        parent = self.options.settings if self.options.settings is not None else Settings()
        max_examples = self.options.max_examples
        if max_examples is None:
            max_examples = _UNLIMITED_EXAMPLES if self.deadline is not None else parent.max_examples
        suppressed = set(parent.suppress_health_check) | {
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
        }
        return Settings(
            parent,
            max_examples=max_examples,
            deadline=None,
            report_multiple_bugs=False,
            suppress_health_check=list(suppressed),
            print_blob=False,
            verbosity=parent.verbosity if self.options.verbose else Verbosity.quiet,
        )

    def fuzz(
        self,
        name: str,
        sizes: list[int],
        draw_example: Callable[[int], st.SearchStrategy],
        execute: Callable[[int, Any, list[Failure]], None],
        report: OpReport,
        *,
        share: int = 1,
        variant: str = "",
        parts_left: int = 1,
    ) -> None:
        """Run Hypothesis over ``sizes`` x ``draw_example(w)``; ``execute`` appends a Failure and raises.

        ``share``: run 1/share of the examples (for checks whose examples are
        slow).  ``variant`` names one of several runs of a check (its own
        database entries); ``parts_left`` the runs of this check still to go,
        this one included, which share what is left of its time.
        """
        failing: list[Failure] = []
        count = [0]
        ran_at: set[int] = set()  # the world sizes examples ran at
        deadline = None
        if self._check_deadline is not None:
            now = time.monotonic()
            deadline = now + max(0.0, self._check_deadline - now) / max(1, parts_left)

        # The source of ``body`` is part of Hypothesis's database key (function_digest): keep it as it
        # is, or the failures stored by earlier runs are no longer replayed.
        def body(data: st.DataObject) -> None:
            w = data.draw(st.sampled_from(sizes), label="world_size")
            example = data.draw(draw_example(w), label=name)
            if deadline is not None and not failing and time.monotonic() > deadline:
                raise _OutOfTime()
            count[0] += 1
            ran_at.add(w)
            execute(w, example, failing)

        # A failure is shrunk, but not for ever: each failing step rebuilds the group (seconds, for a
        # group that starts processes), so shrinking gets its check's share again (at least
        # SHRINK_MIN_S), or SHRINK_LIMIT_S without a duration; then the smallest failure so far is kept.
        shrink_s = SHRINK_LIMIT_S if deadline is None else max(SHRINK_MIN_S, deadline - time.monotonic())
        execute = _shrinking_bounded(execute, shrink_s)
        set_extra_digest(body, f"fuzzdist.conformance|{self.ref}|{name}|{variant}|{sizes}".encode())
        hypothesis_settings = self.hypothesis_settings()
        if share > 1 and self.options.max_examples is None and self.deadline is None:
            hypothesis_settings = Settings(
                hypothesis_settings, max_examples=max(1, hypothesis_settings.max_examples // share)
            )
        test = hypothesis_settings(given(data=st.data())(body))
        if self.options.seed is not None:
            test = hypothesis_seed(self.options.seed)(test)
        try:
            test()
        except _OutOfTime:
            if failing:  # shrinking ran out of time: the smallest failure so far
                report.failure = failing[-1]
                report.status = "failed"
                report.note = f"shrinking stopped after {shrink_s:.0f} s: the example may not be minimal"
        except KeyboardInterrupt:
            # SIGINT/SIGTERM: what ran so far goes into the partial report before the interrupt goes on
            report.examples += count[0]
            report.world_sizes = sorted(ran_at.union(report.world_sizes))
            if failing:
                report.failure, report.status = failing[-1], "failed"
                report.note = "interrupted while shrinking: the example may not be minimal"
            else:
                report.status = "interrupted"
            raise
        except _Refused as refused:
            report.status = "unsupported"
            report.unsupported.append(Unsupported(name, None, (), tuple(sizes), refused.reason))
        except BaseException as exc:  # noqa: BLE001 - Hypothesis's final (shrunk) failure
            flaky = type(exc).__name__.startswith("Flaky")
            if failing:
                failure = failing[-1]
                failure.flaky = flaky
            else:
                failure = Failure(
                    name, f"{name}: {type(exc).__name__}: {failure_text(exc)}", exception=exc, flaky=flaky
                )
            report.failure = failure
            report.status = "failed"
        report.examples += count[0]
        report.world_sizes = sorted(ran_at.union(report.world_sizes))


def _shrinking_bounded(
    execute: Callable[[int, Any, list[Failure]], None], seconds: float
) -> Callable[[int, Any, list[Failure]], None]:
    """``execute``, ending the check (``_OutOfTime``) ``seconds`` after its first failure."""
    first: list[float] = []

    def bounded(w: int, example: Any, failing: list[Failure]) -> None:
        if failing:
            if not first:
                first.append(time.monotonic())
            elif time.monotonic() - first[0] > seconds:
                raise _OutOfTime()
        execute(w, example, failing)

    return bounded


def finish(report: OpReport) -> None:
    """A check that ran to its end without failing conforms; one that ran no example says so."""
    if report.status == "not run":
        report.status = "conforms" if report.examples else "not run"
        if not report.examples:
            report.note = "no example ran within the duration"
