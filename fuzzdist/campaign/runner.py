"""``fuzzdist run``: a pytest plugin that turns each selected Hypothesis property into a campaign.

For each property it replaces pytest's single call of the ``@given`` test by
*rounds*: each round calls the test once more with fresh randomness and
``settings(max_examples=..., database=..., report_multiple_bugs=True)``.

- **Round 1** runs every phase of the test's settings, so the failures
  stored in the database are replayed first; a round ends when Hypothesis
  has shrunk what it found and raised it.
- **Later rounds** skip the explicit and reuse phases (a replayed failure
  would stop generation at once) and *mask* the failures already found:
  an example failing with a known origin counts as a pass, so Hypothesis
  keeps looking for a different bug instead of re-finding and re-shrinking
  the first one.
- **Budget.** The test's ``inner_test`` is wrapped (Hypothesis supports
  reassigning it) by a function that counts examples, collects ``event()``
  labels and ``target()`` scores, records each failure the moment it is
  raised, and raises :class:`BudgetSpent` once the time is up.  With
  ``--duration`` (counted from the first example: imports, collection and
  every pool's start-up, i.e. each test's set-up, are not part of it) the
  time is split by :mod:`fuzzdist.campaign.schedule`: ``even`` gives each
  property one visit, an equal share of the time left when it starts;
  ``adaptive`` runs this plugin's own test loop, visiting properties in
  slices (a floor each, then slices to those still finding new behaviour).
  A failure found before a share ends is shrunk to the end unless the
  whole campaign's time runs out.  ``--max-examples`` is per property and counts every example run,
  shrinking included (checked between rounds, so a shrink is never cut).
- **Nothing is lost.** Hypothesis saves each failing example, and each
  shrink step, to the database as it happens.  BudgetSpent and the
  interrupt raised on SIGINT/SIGTERM subclass KeyboardInterrupt, the one
  exception Hypothesis lets through without saving the example in flight
  (any other would be filed as a failing example).  The JSON report is
  rewritten atomically after every new failure, every few seconds, and at
  the end; the HTML page (``--html``) with it, at each property's end and as
  often between as keeps its rendering under 2% of the time.
- **Distinct failures** are told apart by Hypothesis's InterestingOrigin
  (exception type and raising site, with its chain: a RankError carries the
  remote site), the same way Hypothesis does.

Pools come from the fuzzdist plugin's ``rank_pools`` cache; under torchrun
the CLI implements ``pytest_fuzzdist_make_pool_cache`` to hand it the pool
torchrun formed.  Hypothesis internals go through
:mod:`fuzzdist.compat.hypothesis_internals`.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pytest
from _pytest.outcomes import Failed, OutcomeException
from hypothesis import Phase
from hypothesis import settings as Settings
from hypothesis.errors import Flaky, HypothesisException, UnsatisfiedAssumption

from fuzzdist import known_bugs
from fuzzdist.campaign.database import Database, record_in_index, reproduce_command
from fuzzdist.campaign.html_report import HtmlPage
from fuzzdist.campaign.progress import Progress
from fuzzdist.campaign.report import (
    REPORT_INTERVAL_S,
    CampaignState,
    FailureRecord,
    PropertyState,
    write_json_atomic,
)
from fuzzdist.campaign.schedule import Grant, Scheduler
from fuzzdist.campaign.selection import SelectionPlugin, Targets
from fuzzdist.campaign.series import split_event
from fuzzdist.compat import hypothesis_internals as hc
from fuzzdist.driver.variant_keys import adopt
from fuzzdist.errors import BudgetSpent, CampaignInterrupt, Terminated

if sys.version_info < (3, 11):  # Hypothesis depends on the backport there
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

# Examples per round when only time limits a property: the campaign profile's budget, so
# Hypothesis schedules its phases (e.g. target() optimisation at half-way) as usual.
ROUND_EXAMPLES = 100_000
MAX_EVENT_LABELS = 1000  # distinct event() labels kept per property; the rest are counted together
OTHER_EVENTS = "(other event labels)"
FAILURE_TYPES = (Exception, SystemExit, GeneratorExit, Failed)  # what Hypothesis counts as a failure


@dataclass
class _Round:
    number: int
    mask: frozenset  # origins already found: failing with one of them counts as a pass
    known_entries: frozenset  # round 1: the stored failing examples (bytes), to spot replays
    failed: bool = False  # an unmasked failure was raised in this round (Hypothesis is shrinking)
    valid: int = 0  # examples that ran to the end (passed, failed or masked)


class CampaignPlugin(SelectionPlugin):
    def __init__(self, targets: Targets, *, state: CampaignState, database: Database, progress: Progress,
                 report_path: str | None = None, device: str | None = None,
                 round_examples: int = ROUND_EXAMPLES, pytest_options: Sequence[str] = (),
                 seed: int | None = None, html_path: str | None = None, schedule: str = "adaptive",
                 worker: tuple[int, int] | None = None) -> None:
        super().__init__(targets, device)
        self.worker = worker  # (index, count): this process is worker `index` of `fuzzdist run --jobs count`
        self.schedule = schedule  # "adaptive" or "even" (fuzzdist.campaign.schedule), with a --duration
        self._scheduler: Scheduler | None = None
        self._grant: Grant | None = None  # the adaptive schedule's current visit
        self._replaying = False  # the adaptive loop is handing pytest each property's final reports
        self.html_path = html_path  # the HTML report, rewritten with the JSON one
        self._html = HtmlPage(html_path) if html_path else None
        self.pytest_options = list(pytest_options)  # what a reproducing pytest command needs
        self.seed = seed
        self._rank_output: Any = None  # the plugin's OutputLog, once pytest is configured
        self.state = state
        self.database = database
        self.progress = progress
        self.report_path = report_path
        self.round_examples = round_examples
        self._round: _Round | None = None
        self._next_report = 0.0
        self._announced: set[str] = set()  # properties the progress display has been told are done
        self._expected_skips: dict[str, str] = {}
        self._indexed: set[str] = set()
        self._key: bytes | None = None  # the database key of the property running
        self._report_errors: dict[str, str] = {}  # "json"/"html" -> the first error writing it (warned once)
        self.write_errors: dict[str, str] = {}  # "json"/"html" -> why its latest write failed (the summary says)

    # -- set-up ---------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items) -> None:
        super().pytest_collection_modifyitems(session, config, items)
        if self.worker is not None and items:
            self._take_my_share(config, items)
        for item in items:
            self.state.properties[item.nodeid] = PropertyState(item.nodeid, budget_examples=self.state.max_examples)
            reason = _expected_skip(item)
            if reason:
                self._expected_skips[item.nodeid] = reason

    def _take_my_share(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """As worker I of N: every Nth property from the I-th; with fewer properties than workers, property
        I mod P, with the seed moved on by SEED_STRIDE for each worker before it on that property."""
        from fuzzdist.campaign.jobs import SEED_STRIDE

        assert self.worker is not None  # only called for a worker
        index, count = self.worker
        if len(items) >= count:
            mine = items[index::count]
        else:
            mine = [items[index % len(items)]]
            if self.seed is not None:
                self.seed += index // len(items) * SEED_STRIDE
        removed = [item for item in items if item not in mine]
        if removed:
            config.hook.pytest_deselected(items=removed)
        items[:] = mine
        self.state.worker = {"index": index, "count": count, "seed": self.seed,
                             "properties": [item.nodeid for item in mine], "pid": os.getpid()}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from fuzzdist.driver.plugin import rank_output_key

        self._rank_output = session.config.stash.get(rank_output_key, None)
        if self.error is None and not self.collect_errors and self.state.properties:
            self.state.status = "running"
            self.progress.start(self.state)
            self.write_report()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        """Set-up (where a property's rank pool starts) is not charged to the time budget."""
        start = time.monotonic()
        try:
            return (yield)
        finally:
            took = time.monotonic() - start
            prop = self.state.properties.get(item.nodeid)
            if prop is not None:
                prop.startup_s += took
            if self.state.deadline is not None:
                self.state.deadline += took

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self._replaying:
            self._take_report(report)

    def _take_report(self, report: pytest.TestReport) -> None:
        prop = self.state.properties.get(report.nodeid)
        if prop is None:
            return
        if report.when == "setup" and report.skipped:
            prop.status = "skipped" if prop.status == "pending" else prop.status
            prop.reason = _skip_reason(report)
            self._announced.add(prop.nodeid)
            self.progress.property_done(self.state, prop)
        elif (report.failed and report.when in ("setup", "teardown")
              and prop.status in ("pending", "running", "passed", "known")):
            prop.status = "error"
            prop.reason = f"{report.when} failed: " + _first_line(str(report.longreprtext))
            self._announced.add(prop.nodeid)
            self.progress.property_done(self.state, prop)

    # -- the adaptive schedule: visits in slices ----------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session):
        """With ``--duration`` and the adaptive schedule, visit the properties in slices (see
        fuzzdist.campaign.schedule); otherwise pytest's own loop (one visit each, in order)."""
        state = self.state
        if (self.schedule != "adaptive" or state.duration_s is None or self.error or self.collect_errors
                or session.testsfailed or session.config.option.collectonly or not session.items):
            return None
        from _pytest.runner import runtestprotocol

        items = {item.nodeid: item for item in session.items}
        last: dict[str, list] = {}  # nodeid -> the reports of its latest visit, handed to pytest at the end
        # Between visits everything above the session is torn down (the next visit may be any test);
        # session fixtures, and the pools, which live in the plugin's cache, stay up.
        teardown_to = cast(Any, session)

        def visit(item: pytest.Item) -> None:
            reports = runtestprotocol(item, log=False, nextitem=teardown_to)
            last[item.nodeid] = reports
            for report in reports:
                self._take_report(report)

        scheduled: list[str] = []
        try:
            for item in session.items:  # those this machine skips, or not properties: one visit, first
                if item.nodeid in self._expected_skips or item.nodeid not in state.properties:
                    visit(item)
                else:
                    scheduled.append(item.nodeid)
            if scheduled:
                self._scheduler = scheduler = Scheduler(scheduled, state.duration_s)
                while not session.shouldstop and not session.shouldfail:
                    grant = scheduler.next()
                    if grant is None or (state.deadline is not None and state.time_left() == 0):
                        break
                    prop = state.properties[grant.nodeid]
                    before, elapsed, warmup = behaviour(prop), prop.elapsed_s, prop.warmup_s or 0.0
                    self._grant = grant
                    try:
                        visit(items[grant.nodeid])
                    finally:
                        self._grant = None
                    done = None
                    if prop.status in ("skipped", "error", "interrupted"):
                        done = prop.status
                    elif prop.stop_reason != "time budget":
                        done = prop.stop_reason or prop.status
                    charged = prop.elapsed_s - elapsed - ((prop.warmup_s or 0.0) - warmup)
                    scheduler.record(grant, charged, behaviour(prop) - before, done)
                    prop.schedule = scheduler.share(grant.nodeid)
                    prop.visits += 1
                    if done is not None and grant.nodeid not in self._announced:  # no further visit
                        self._announced.add(grant.nodeid)
                        self.progress.property_done(state, prop)
                    elif done is None:
                        self.progress.visit_done(state, prop, grant.kind, charged, behaviour(prop) - before)
        finally:
            for nodeid in scheduled:  # "done" once per property, after its last visit
                prop = state.properties[nodeid]
                if nodeid not in self._announced and prop.visits:
                    self._announced.add(nodeid)
                    self.progress.property_done(state, prop)
            self._replaying = True
            try:  # pytest's own reporting (JUnit, exit code) gets each property's final visit, in order
                for item in session.items:
                    reports = last.get(item.nodeid)
                    if reports is None:
                        continue
                    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
                    for report in reports:
                        item.ihook.pytest_runtest_logreport(report=report)
                    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
            finally:
                self._replaying = False
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        return True

    # -- the campaign of one property -------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function):
        prop = self.state.properties.get(pyfuncitem.nodeid)
        if prop is None:
            return None
        testargs = {arg: pyfuncitem.funcargs[arg] for arg in pyfuncitem._fixtureinfo.argnames}
        self._run_property(pyfuncitem, prop, testargs)
        return True

    def _run_property(self, item: pytest.Function, prop: PropertyState, testargs: dict) -> None:
        state = self.state
        now = time.monotonic()
        if state.duration_s is not None and state.deadline is None:
            # The clock starts with the first property, once its rank pool is up: imports,
            # collection and the first pool's start-up are not part of the budget.
            state.deadline = now + state.duration_s
        if state.deadline is not None:
            if now >= state.deadline:
                prop.status, prop.reason = "not run", "the campaign's time was spent before its turn"
                pytest.skip(prop.reason)
            if self._grant is not None:  # the adaptive schedule's slice
                prop.share_end = min(state.deadline, now + self._grant.seconds)
            else:
                waiting = [p for p in state.properties.values()
                           if p.status == "pending" and p.nodeid not in self._expected_skips]
                prop.share_end = now + (state.deadline - now) / max(1, len(waiting))
                prop.schedule = {"even_share_s": round(prop.share_end - now, 3),
                                 "why": f"even split: {len(waiting)} properties shared the time left"}
        fn = item.obj
        handle = fn.hypothesis
        inner = handle.inner_test
        original_settings = hc.given_settings(fn)
        overrides = hc.TestOverrides(fn)
        # Hypothesis's standard key (pytest's hypothesis plugin, or fuzzdist's for a rank-pool
        # variant, has already set the per-parametrization digest, if any, on inner_test);
        # pinned so the wrapper can't change it.
        key = self._key = hc.function_digest(inner)
        db = self.database.db
        prop.database_key = key.hex()
        adopted = adopt(item, db, key)  # what its pool variants' shared key holds, as plain pytest does
        if adopted is not None:
            self.progress.note(state, adopted)
        known = frozenset(db.fetch(key))
        prop.stored_before = len(known)
        given = set(hc.given_argument_names(fn))
        earlier, prop.known = prop.known, known_bugs.current_tally()  # the fuzzdist plugin's, around this call
        if earlier and prop.known is not None and prop.known is not earlier:  # an earlier visit's sightings
            for bug_id, seen in earlier.sightings.items():
                prop.known.sightings.setdefault(bug_id, seen)
        prop.status, prop.started_at, prop.stop_reason = "running", now, None
        self._sample(prop)
        # A whole property's run is announced as it starts; the adaptive schedule's visits as they end.
        self.progress.update(state, force=self._grant is None)
        base_phases = tuple(original_settings.phases)
        later_phases = tuple(p for p in base_phases if p not in (Phase.explicit, Phase.reuse))
        try:
            overrides.set_database_key(key)
            handle.inner_test = self._wrap(item, prop, inner, given)
            while True:
                stop = self._budget_stop(prop)
                if stop:
                    prop.stop_reason = stop
                    break
                number = prop.rounds + 1
                if number > 1 and Phase.generate not in base_phases:
                    prop.stop_reason = "the test's phases don't generate examples"
                    break
                max_examples = self.round_examples
                if state.max_examples is not None:
                    max_examples = min(max_examples, state.max_examples - prop.examples)
                self._round = _Round(number, frozenset(prop.failures), known if number == 1 else frozenset())
                overrides.set_settings(Settings(
                    parent=original_settings, max_examples=max_examples, database=db,
                    report_multiple_bugs=True, derandomize=False, print_blob=True,
                    phases=base_phases if number == 1 else later_phases))
                if self.seed is not None:
                    overrides.set_seed(self.seed + number - 1)
                prop.rounds = number
                before = prop.examples
                try:
                    fn(**testargs)
                except BudgetSpent:
                    prop.stop_reason = "time budget"
                    break
                except CampaignInterrupt as exc:
                    self._interrupted(item, prop, getattr(exc, "signal_name", "SIGINT"))
                    break
                except KeyboardInterrupt:
                    self._interrupted(item, prop, "SIGINT")
                    break
                except OutcomeException as exc:
                    if not isinstance(exc, Failed):
                        raise  # pytest.skip()/exit() inside the property
                    if self._record_round(item, prop, exc):
                        break
                except BaseException as exc:
                    if self._record_round(item, prop, exc):
                        break
                else:
                    if self._round.valid < max_examples and (state.max_examples is None
                                                             or prop.examples < state.max_examples):
                        prop.stop_reason = ("too many invalid examples" if prop.invalid > prop.examples
                                            else "search space exhausted")
                        break
                if state.interrupted_by is not None:  # its exception was caught on the way up
                    self._interrupted(item, prop, state.interrupted_by)
                    break
                if prop.failures:
                    self._index(item.nodeid)
                if prop.examples == before and not self._round.failed:
                    prop.stop_reason = "a round ran no example"
                    break
        finally:
            handle.inner_test = inner
            overrides.restore()
            if prop.failures:
                self._index(item.nodeid)
            self._round = None
            self._key = None
            prop.elapsed_s += time.monotonic() - now
            prop.started_at = None
            self._sample(prop)
            if prop.status == "running":
                if any(f.kind == "error" for f in prop.failures.values()):
                    prop.status = "error"
                else:
                    prop.status = "failed" if prop.failures else "known" if prop.known_count else "passed"
            if self._grant is None:  # a visit of the adaptive schedule is announced done at its last one
                self.progress.property_done(state, prop)
            self.write_report(html_now=True)
        if prop.failures:
            pytest.fail(_failure_text(prop), pytrace=False)

    def _budget_stop(self, prop: PropertyState) -> str | None:
        now = time.monotonic()
        if self.state.deadline is not None:
            assert prop.share_end is not None  # set with the deadline when the property starts
            if now >= self.state.deadline or now >= prop.share_end:
                return "time budget"
        if self.state.max_examples is not None and prop.examples >= self.state.max_examples:
            return "max examples"
        return None

    def _interrupted(self, item: pytest.Function, prop: PropertyState, signal_name: str) -> None:
        self.state.interrupted_by = self.state.interrupted_by or signal_name
        self.state.status = "interrupted"
        prop.status = "interrupted"
        prop.stop_reason = f"interrupted by {signal_name}"
        item.session.shouldstop = f"fuzzdist campaign interrupted by {signal_name}"

    # -- the per-example wrapper ------------------------------------------------------------

    def _wrap(self, item: pytest.Function, prop: PropertyState, inner, given: set):
        plugin, state = self, self.state

        @functools.wraps(inner)
        def fuzzdist_campaign_example(*args, **kwargs):
            rnd = plugin._round
            if state.interrupted_by is not None:  # a signal arrived; its exception may have been caught
                raise Terminated(state.interrupted_by)
            if state.deadline is not None:
                now = time.monotonic()
                if now >= state.deadline or (not rnd.failed and now >= prop.share_end):
                    raise BudgetSpent()
            warming_up = prop.warmup_s is None  # its first example: the ranks' lazy imports and set-up
            started = time.monotonic()
            try:
                result = inner(*args, **kwargs)
            except UnsatisfiedAssumption:
                prop.invalid += 1
                raise
            except FAILURE_TYPES as exc:
                if warming_up:
                    plugin._warmed_up(prop, started)
                prop.examples += 1
                rnd.valid += 1
                masked = plugin._on_failure(item, prop, exc, kwargs, given)
                plugin._after_example(prop)
                if masked:
                    return None
                raise
            if warming_up:
                plugin._warmed_up(prop, started)
            prop.examples += 1
            rnd.valid += 1
            plugin._after_example(prop)
            return result

        return fuzzdist_campaign_example

    def _warmed_up(self, prop: PropertyState, started: float) -> None:
        """A property's first example pays what the ranks do once for it (e.g. importing DTensor: seconds
        on a 4-rank pool); like the pool's start-up, it is not charged to the time budget."""
        took = time.monotonic() - started
        prop.warmup_s = took
        if prop.share_end is not None:
            prop.share_end += took
        if self.state.deadline is not None:
            self.state.deadline += took
        self._next_report = 0.0  # the report shows the property running at once (a --jobs parent reads it)

    def _after_example(self, prop: PropertyState) -> None:
        observed = hc.current_example_observations()
        if observed is not None:
            events = prop.events
            seen_events, scores = observed
            values: dict[str, set[str]] = {}  # key -> values, for the pairs reached together
            for label, value in seen_events.items():
                pair = split_event(label, value)
                if pair is not None:
                    values.setdefault(pair[0], set()).add(pair[1])
                label = label if value == "" else f"{label}: {value}"
                if label not in events and len(events) >= MAX_EVENT_LABELS:
                    label = OTHER_EVENTS
                events[label] += 1
            if len(values) > 1:
                prop.event_pairs.add_example(values)
            for label, score in scores.items():
                if label not in prop.targets or score > prop.targets[label]:
                    prop.target_gains += label in prop.targets
                    prop.targets[label] = score
        now = time.monotonic()
        self._sample(prop)
        self.progress.update(self.state)
        if now >= self._next_report:
            self.write_report()

    def _sample(self, prop: PropertyState) -> None:
        """A point of the property's time series (kept at most once a series interval)."""
        prop.series.add(self.state.elapsed(), prop.examples, prop.invalid, len(prop.failures))

    def _on_failure(self, item, prop: PropertyState, exc: BaseException, kwargs: dict, given: set) -> bool:
        """Record a failing example as it happens; True if its origin is masked (counts as a pass)."""
        rnd = self._round
        assert rnd is not None  # failures happen inside a round
        origin = _origin(exc)
        record = prop.failures.get(origin)
        if record is not None:
            record.occurrences += 1
            if origin in rnd.mask:
                return True
            rnd.failed = True
            if not record.shrunk:  # Hypothesis is shrinking it: keep the latest (smallest) example
                record.example, record.summary = _example_text(item, kwargs, given), _summary(exc)
                record.hang = _hang(exc) or record.hang
            return False
        rnd.failed = True
        example = _example_text(item, kwargs, given)
        from_database = False
        if rnd.known_entries:
            from_database = hc.current_example_bytes() in rnd.known_entries
        record = FailureRecord(
            origin=origin, kind="failure", summary=_summary(exc), example=example,
            traceback="".join(traceback.format_exception(exc)),
            reproduce=reproduce_command(item.nodeid, self.database, self.pytest_options),
            found_after_examples=prop.examples, found_after_s=round(self.state.elapsed(), 3),
            from_database=from_database, hang=_hang(exc))
        prop.failures[origin] = record
        self._index(item.nodeid)
        self.progress.new_failure(self.state, prop, record.summary, from_database)
        self.write_report()
        return False

    def _index(self, nodeid: str) -> None:
        """Note in the database which test the current key belongs to (once per property)."""
        if nodeid in self._indexed or self._key is None:
            return
        self._indexed.add(nodeid)
        try:
            record_in_index(self.database.db, self._key, nodeid)
        except Exception as exc:  # the failure itself is saved; only the index entry is missing
            self.progress.stream.write(f"fuzzdist: warning: can't update the database index: {exc}\n")

    def _record_round(self, item, prop: PropertyState, exc: BaseException) -> bool:
        """Take in the (shrunk) failures a round raised; True if the property can't go on."""
        stop = False
        for leaf in _leaves(exc):
            if isinstance(leaf, KeyboardInterrupt):  # an interrupt Hypothesis grouped with failures
                continue
            origin = _origin(leaf)
            if isinstance(leaf, Flaky):
                kind = "flaky"
            elif isinstance(leaf, HypothesisException):
                kind, stop = "error", True
            else:
                kind = "failure"
            record = prop.failures.get(origin)
            if record is None:
                record = FailureRecord(origin=origin, kind=kind, summary=_summary(leaf), example="",
                                       reproduce=reproduce_command(item.nodeid, self.database, self.pytest_options),
                                       found_after_examples=prop.examples,
                                       found_after_s=round(self.state.elapsed(), 3))
                prop.failures[origin] = record
                self.progress.new_failure(self.state, prop, record.summary, False)
            record.kind = kind
            record.summary = _summary(leaf)
            record.hang = _hang(leaf) or record.hang
            notes = [str(n) for n in getattr(leaf, "__notes__", ())]
            record.example = _example_from_notes(notes) or record.example or "(no example: " + kind + ")"
            record.shrunk = kind != "error"
            record.traceback = "".join(traceback.format_exception(leaf))
            record.reproduce_failure = _blob_from_notes(notes)
            if kind == "error":
                prop.status = "error"
                prop.reason = record.summary
        self.write_report()
        return stop

    # -- the report -----------------------------------------------------------------------

    def write_report(self, html_now: bool = False) -> None:
        """Rewrite the JSON report and the HTML page (each atomically), whichever were asked for.

        The page takes longer to make than the JSON (tens of milliseconds per property), so between
        properties it is rewritten with the JSON only while that keeps it under HTML_COST_SHARE of the
        time; ``html_now`` (a property's end, the campaign's) rewrites it regardless.
        """
        now = time.monotonic()
        self._next_report = now + REPORT_INTERVAL_S
        if not self.report_path and not self.html_path:
            return
        log = self._rank_output
        if log is not None:  # what the ranks wrote in passing examples, per property
            for nodeid, prop in self.state.properties.items():
                prop.rank_output = log.entries(nodeid)
        data = self.state.to_dict()
        if self.report_path:
            try:
                write_json_atomic(self.report_path, data)
                self.write_errors.pop("json", None)
            except OSError as exc:
                self.write_errors["json"] = str(exc)
                self._warn_once("json", f"can't write the report {self.report_path}: {exc}")
        if self._html is not None:
            error = self._html.write(data, force=html_now)
            if error is None:
                self.write_errors.pop("html", None)
            else:
                self.write_errors["html"] = error
                self._warn_once("html", f"can't write the HTML report {self.html_path}: {error}")

    def _warn_once(self, what: str, text: str) -> None:
        if what not in self._report_errors:
            self._report_errors[what] = text
            self.progress.stream.write(f"fuzzdist: warning: {text}\n")


def behaviour(prop: PropertyState) -> int:
    """New behaviour reached so far, counted: event() values and value pairs, target() labels and
    improvements of their best scores, distinct failures.  What the adaptive schedule rewards."""
    return (len(prop.events) + prop.event_pairs.cells + len(prop.targets) + prop.target_gains
            + len(prop.failures))


def _example_text(item, kwargs: dict, given: set) -> str:
    """The drawn arguments of an example as a call (until Hypothesis prints the shrunk one)."""
    shown = ", ".join(f"{name}={value!r}" for name, value in kwargs.items() if name in given)
    return f"{getattr(item, 'originalname', item.name)}({shown[:4000]})"


def _origin(exc: BaseException) -> str:
    """Hypothesis's InterestingOrigin of a failure, on one line: what tells distinct failures apart."""
    return "; ".join(line.strip() for line in hc.interesting_origin(exc).splitlines())


def _leaves(exc: BaseException):
    """The distinct failures in what a round raised (Hypothesis groups several in an ExceptionGroup)."""
    if type(exc) in (BaseExceptionGroup, ExceptionGroup):  # not subclasses: Hypothesis's Flaky* are one
        for sub in cast(BaseExceptionGroup, exc).exceptions:
            yield from _leaves(sub)
    else:
        yield exc


def _example_from_notes(notes: list[str]) -> str:
    lines = []
    for note in notes:
        for prefix in ("Failing test case: ", "Falsifying example: ", "Falsifying explicit example: "):
            if note.startswith(prefix):
                lines.append(note[len(prefix):])
                break
        else:
            if note.startswith("Draw "):
                lines.append(note)
    return "\n".join(lines)


def _blob_from_notes(notes: list[str]) -> str | None:
    for note in notes:
        match = re.search(r"@reproduce_failure\([^)]*\)", note)
        if match:
            return match.group(0)
    return None


def _hang(exc: BaseException) -> dict | None:
    """Why the ranks hung, for a RankTimeout (or a RankError whose other ranks were left waiting)."""
    diagnosis = getattr(exc, "diagnosis", None)
    return diagnosis.to_dict() if diagnosis is not None else None


def _summary(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_first_line(str(exc))}".rstrip(": ")


def _first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return _first_line(str(longrepr))


def _expected_skip(item: pytest.Item) -> str | None:
    """Why the fuzzdist plugin will skip ``item`` on this machine (None: it will run)."""
    try:
        from fuzzdist.pool.capabilities import missing, missing_gpus

        if item.get_closest_marker("gpu") is not None:
            reason = missing_gpus(1)
            if reason:
                return reason
        marker = item.get_closest_marker("multi_gpu")
        if marker is not None:
            reason = missing_gpus(marker.kwargs.get("n", marker.args[0] if marker.args else 2))
            if reason:
                return reason
        for marker in item.iter_markers("needs"):
            reason = missing(*marker.args)
            if reason:
                return reason
    except Exception:
        return None
    return None


def _failure_text(prop: PropertyState) -> str:
    parts = [f"fuzzdist campaign found {len(prop.failures)} distinct failure(s) in {prop.nodeid} "
             f"after {prop.examples:,} examples"]
    for i, failure in enumerate(prop.failures.values(), 1):
        parts.append(f"\n[{i}] {failure.summary}\n    where: {failure.origin}\n    minimal example:\n"
                     + "\n".join("        " + line for line in failure.example.splitlines())
                     + f"\n    reproduce: {failure.reproduce}\n\n{failure.traceback}")
    return "\n".join(parts)
