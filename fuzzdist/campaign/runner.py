"""``fuzzdist run``: a pytest plugin that turns each selected Hypothesis property into a campaign.

For each property it replaces pytest's single call of the ``@given`` test by
*rounds* (:mod:`fuzzdist.campaign.rounds`): each round calls the test once
more with fresh randomness, masking the failures already found, until the
property's share of the budget is spent.  Its distinct failures are recorded
as they happen (:mod:`fuzzdist.campaign.failures`).  This module ties them
together as pytest hooks:

- **Sharding.** As worker I of ``fuzzdist run --jobs N``, it keeps its share
  of the collected properties (:mod:`fuzzdist.campaign.jobs` runs the workers).
- **The schedule.** With ``--duration`` (counted from the first example:
  imports, collection and every pool's start-up, i.e. each test's set-up,
  are not part of it) the time is split by :mod:`fuzzdist.campaign.schedule`:
  ``even`` gives each property one visit, an equal share of the time left
  when it starts; ``adaptive`` runs this plugin's own test loop, visiting
  properties in slices (a floor each, then slices to those still finding new
  behaviour).
- **Nothing is lost.** Hypothesis saves each failing example, and each
  shrink step, to the database as it happens.  BudgetSpent and the
  interrupt raised on SIGINT/SIGTERM subclass KeyboardInterrupt, the one
  exception Hypothesis lets through without saving the example in flight
  (any other would be filed as a failing example).  The JSON report is
  rewritten atomically after every new failure, every few seconds, and at
  the end; the HTML page (``--html``) with it, at each property's end and as
  often between as keeps its rendering under 2% of the time.

Pools come from the fuzzdist plugin's ``rank_pools`` cache; under torchrun
the CLI implements ``pytest_fuzzdist_make_pool_cache`` to hand it the pool
torchrun formed.  Hypothesis and pytest internals go through
:mod:`fuzzdist.compat`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, cast

import pytest

from fuzzdist.campaign import coverage_report
from fuzzdist.campaign.database import Database
from fuzzdist.campaign.failures import FailureLog, first_line
from fuzzdist.campaign.html_report import HtmlPage
from fuzzdist.campaign.progress import Progress
from fuzzdist.campaign.report import REPORT_INTERVAL_S, CampaignState, PropertyState, write_json_atomic
from fuzzdist.campaign.rounds import ROUND_EXAMPLES, VISIT_EXAMPLES, PropertyRun
from fuzzdist.campaign.schedule import Finds, Grant, Scheduler
from fuzzdist.campaign.selection import SelectionPlugin, Targets
from fuzzdist.compat import pytest_internals
from fuzzdist.pool import line_coverage, starting


class CampaignPlugin(SelectionPlugin):
    """The ``fuzzdist run`` plugin: runs each selected property as rounds within its share of the budget
    (a :class:`~fuzzdist.campaign.rounds.PropertyRun` per visit), keeps ``state`` and writes the reports."""

    def __init__(
        self,
        targets: Targets,
        *,
        state: CampaignState,
        database: Database,
        progress: Progress,
        report_path: str | None = None,
        device: str | None = None,
        round_examples: int = ROUND_EXAMPLES,
        pytest_options: Sequence[str] = (),
        seed: int | None = None,
        html_path: str | None = None,
        schedule: str = "adaptive",
        worker: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(targets, device)
        # Every campaign starts pools: the fork server imports torch while the properties are collected.
        starting.start_fork_server_early(device or "cpu")
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
        self.next_report = 0.0  # monotonic: when the report is due again
        self._announced: set[str] = set()  # properties the progress display has been told are done
        self._expected_skips: dict[str, str] = {}
        self._report_errors: dict[str, str] = {}  # "json"/"html" -> the first error writing it (warned once)
        self.write_errors: dict[str, str] = {}  # "json"/"html" -> why its latest write failed (the summary says)
        self.failures = FailureLog(state, database, progress, self.pytest_options, self.write_report)

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
        self.state.worker = {
            "index": index,
            "count": count,
            "seed": self.seed,
            "properties": [item.nodeid for item in mine],
            "pid": os.getpid(),
        }

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
        elif (
            report.failed
            and report.when in ("setup", "teardown")
            and prop.status in ("pending", "running", "passed", "known")
        ):
            prop.status = "error"
            prop.reason = f"{report.when} failed: " + _error_line(str(report.longreprtext))
            self._announced.add(prop.nodeid)
            self.progress.property_done(self.state, prop)

    # -- the adaptive schedule: visits in slices ----------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session):
        """With ``--duration`` and the adaptive schedule, visit the properties in slices (see
        fuzzdist.campaign.schedule); otherwise pytest's own loop (one visit each, in order)."""
        state = self.state
        if (
            self.schedule != "adaptive"
            or state.duration_s is None
            or self.error
            or self.collect_errors
            or session.testsfailed
            or session.config.option.collectonly
            or not session.items
        ):
            return None
        items = {item.nodeid: item for item in session.items}
        last: dict[str, list] = {}  # nodeid -> the reports of its latest visit, handed to pytest at the end
        # Between visits everything above the session is torn down (the next visit may be any test);
        # session fixtures, and the pools, which live in the plugin's cache, stay up.
        teardown_to = cast(Any, session)

        def visit(item: pytest.Item) -> None:
            reports = pytest_internals.run_test_protocol(item, teardown_to)
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
                self._scheduler = scheduler = Scheduler(
                    scheduled, state.duration_s, lines_on=line_coverage.ledger() is not None
                )
                while not session.shouldstop and not session.shouldfail:
                    grant = scheduler.next()
                    if grant is None or (state.deadline is not None and state.time_left() == 0):
                        break
                    prop = state.properties[grant.nodeid]
                    before, elapsed, warmup = finds(prop), prop.elapsed_s, prop.warmup_s or 0.0
                    examples = prop.examples
                    self._grant = grant
                    try:
                        visit(items[grant.nodeid])
                    finally:
                        self._grant = None
                    done = None
                    if prop.status in ("skipped", "error", "interrupted"):
                        done = prop.status
                    elif prop.stop_reason not in ("time budget", VISIT_EXAMPLES):
                        done = prop.stop_reason or prop.status
                    charged = prop.elapsed_s - elapsed - ((prop.warmup_s or 0.0) - warmup)
                    found = finds(prop, before)
                    scheduler.record(grant, charged, found, done, examples=prop.examples - examples)
                    prop.schedule = scheduler.share(grant.nodeid)
                    prop.visits += 1
                    if done is not None and grant.nodeid not in self._announced:  # no further visit
                        self._announced.add(grant.nodeid)
                        self.progress.property_done(state, prop)
                    elif done is None:
                        self.progress.visit_done(state, prop, grant.kind, charged, found.total)
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
        pytest_internals.end_test_loop(session)
        return True

    # -- the campaign of one property -------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function):
        prop = self.state.properties.get(pyfuncitem.nodeid)
        if prop is None:
            return None
        testargs = pytest_internals.call_arguments(pyfuncitem)
        grant = self._grant
        run = PropertyRun(
            self,
            pyfuncitem,
            prop,
            slice_s=None if grant is None else grant.seconds,
            slice_examples=None if grant is None else grant.examples,
            expected_skips=self._expected_skips,
        )
        line_coverage.set_scope(pyfuncitem.nodeid)  # --cover: the lines the ranks reach count for this property
        try:
            run.run(testargs)
        finally:
            line_coverage.set_scope(None)
        return True

    # -- the report -----------------------------------------------------------------------

    def write_report(self, html_now: bool = False) -> None:
        """Rewrite the JSON report and the HTML page (each atomically), whichever were asked for.

        The page takes longer to make than the JSON (tens of milliseconds per property), so between
        properties it is rewritten with the JSON only while that keeps it under HTML_COST_SHARE of the
        time; ``html_now`` (a property's end, the campaign's) rewrites it regardless.
        """
        now = time.monotonic()
        self.next_report = now + REPORT_INTERVAL_S
        if not self.report_path and not self.html_path:
            return
        log = self._rank_output
        if log is not None:  # what the ranks wrote in passing examples, per property
            for nodeid, prop in self.state.properties.items():
                prop.rank_output = log.entries(nodeid)
        data = self.state.to_dict()
        ledger = line_coverage.ledger()
        if ledger is not None:  # --cover: the lines reached on the ranks
            data["coverage"] = coverage_report.build_section(ledger, self.state.started)
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


def finds(prop: PropertyState, before: Finds | None = None) -> Finds:
    """What ``prop`` has reached so far (less ``before``, what it had reached before a visit): distinct
    failures; event() values and value pairs, target() labels and improvements of their best scores;
    with ``--cover``, lines of code reached on the ranks.  What the adaptive schedule rewards."""
    now = Finds(
        failures=len(prop.failures),
        behaviours=len(prop.events) + prop.event_pairs.cells + len(prop.targets) + prop.target_gains,
        lines=line_coverage.lines_reached(prop.nodeid),
    )
    if before is None:
        return now
    return Finds(now.failures - before.failures, now.behaviours - before.behaviours, now.lines - before.lines)


def _error_line(longrepr: str) -> str:
    """The error in pytest's report of a failed set-up or teardown: its first ``E`` line (the exception),
    not the first line of the source listing above it."""
    for line in longrepr.splitlines():
        if line.startswith("E "):
            return first_line(line[1:])
    return first_line(longrepr)


def _skip_reason(report: pytest.TestReport) -> str:
    """Why pytest skipped a test, from its report."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return first_line(str(longrepr))


def _expected_skip(item: pytest.Item) -> str | None:
    """Why the fuzzdist plugin will skip ``item`` on this machine (None: it will run)."""
    try:
        from fuzzdist.pool.capabilities.gpu import missing_gpus
        from fuzzdist.pool.capabilities.probes import missing

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
    except Exception:  # noqa: BLE001 - a marker's own check failing must not stop the campaign
        return None
    return None
