"""The rounds of one property: its ``@given`` test called again and again within its budget.

Each round calls the test once more with fresh randomness and
``settings(max_examples=..., database=..., report_multiple_bugs=True)``:

- **Round 1** runs every phase of the test's settings, so the failures
  stored in the database are replayed first; a round ends when Hypothesis
  has shrunk what it found and raised it.
- **Later rounds** skip the explicit and reuse phases (a replayed failure
  would stop generation at once) and *mask* the failures already found:
  an example failing with a known origin counts as a pass, so Hypothesis
  keeps looking for a different bug instead of re-finding and re-shrinking
  the first one.
- **The example wrapper.** The test's ``inner_test`` is replaced (Hypothesis
  supports reassigning it) by a function that counts examples, collects
  ``event()`` labels and ``target()`` scores, hands each failure to the
  :class:`~fuzzdist.campaign.failures.FailureLog` the moment it is raised,
  and raises :class:`BudgetSpent` once the time is up.
- **Budget.** With ``--duration`` the property gets a share of the time: the
  adaptive schedule's slice (its floor: a number of examples, within a time
  cap), or an even part of what is left; the clock
  starts with the first example, and the first example's one-off work on the
  ranks is not charged.  A failure found before a share ends is shrunk to
  the end unless the whole campaign's time runs out.  ``--max-examples`` is
  per property and counts every example run, shrinking included (checked
  between rounds, so a shrink is never cut).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

import pytest
from hypothesis import Phase
from hypothesis import settings as Settings
from hypothesis.errors import UnsatisfiedAssumption

from fuzzdist import known_bugs
from fuzzdist.campaign.database import Database, error_line, too_large_note
from fuzzdist.campaign.failures import FailureLog, failures_text, first_line
from fuzzdist.campaign.progress import Progress
from fuzzdist.campaign.report import CampaignState, PropertyState
from fuzzdist.campaign.series import split_event
from fuzzdist.compat import hypothesis_internals as hc
from fuzzdist.compat.pytest_internals import Failed, OutcomeException
from fuzzdist.driver.variant_keys import adopt
from fuzzdist.errors import BudgetSpent, CampaignInterrupt, DatabaseUnreadable, PoolGone, PoolLost, Terminated

# Examples per round when only time limits a property: the campaign profile's budget, so
# Hypothesis schedules its phases (e.g. target() optimisation at half-way) as usual.
ROUND_EXAMPLES = 100_000
MAX_EVENT_LABELS = 1000  # distinct event() labels kept per property; the rest are counted together
OTHER_EVENTS = "(other event labels)"
VISIT_EXAMPLES = "its visit's examples"  # stop reason: the visit ran the examples its grant asked for
FAILURE_TYPES = (Exception, SystemExit, GeneratorExit, Failed)  # what Hypothesis counts as a failure


@dataclass
class Round:
    """One call of the property's test: what it masks and what it has run so far."""

    number: int
    mask: frozenset  # origins already found: failing with one of them counts as a pass
    known_entries: frozenset  # round 1: the stored failing examples (bytes), to spot replays
    failed: bool = False  # an unmasked failure was raised in this round (Hypothesis is shrinking)
    valid: int = 0  # examples that ran to the end (passed, failed or masked)


class Campaign(Protocol):
    """What a property's rounds use of the campaign running them (the ``fuzzdist run`` plugin)."""

    state: CampaignState
    database: Database
    progress: Progress
    failures: FailureLog
    seed: int | None  # round r of a property draws from seed + r - 1 (None: fresh randomness)
    round_examples: int
    next_report: float  # monotonic: when the report is due again (write_report moves it on)

    def write_report(self, html_now: bool = False) -> None:
        """Rewrite the campaign's reports."""
        ...


class PropertyRun:
    """One visit of one property: :meth:`run` calls its test round after round until its budget is
    spent, it can't go on, or the campaign is interrupted, then fails the pytest test with its
    distinct failures, if any.

    ``slice_s``: the adaptive schedule's slice for this visit (None: an even share of the time left
    with the properties still ``pending``, those in ``expected_skips`` aside); ``slice_examples``: the
    visit also ends once it has run that many examples (the schedule's floor; None: no such limit).
    """

    def __init__(
        self,
        campaign: Campaign,
        item: pytest.Function,
        prop: PropertyState,
        *,
        slice_s: float | None = None,
        slice_examples: int | None = None,
        expected_skips: Collection[str] = (),
    ) -> None:
        self.campaign = campaign
        self.state = campaign.state
        self.item = item
        self.prop = prop
        self.slice_s = slice_s
        # the example count at which this visit ends (set when it starts)
        self.examples_end: int | None = None if slice_examples is None else prop.examples + slice_examples
        self.expected_skips = expected_skips
        self.round: Round | None = None
        self.key: bytes | None = None  # the database key of the property
        self.given: set[str] = set()  # the names of the arguments @given draws

    # -- the rounds ---------------------------------------------------------------------------

    def run(self, testargs: dict[str, Any]) -> None:
        """Run the property's rounds with ``testargs`` (its fixtures' values)."""
        campaign, item, prop, state = self.campaign, self.item, self.prop, self.state
        now = time.monotonic()
        self._take_share(now)
        fn = item.obj
        handle = fn.hypothesis
        inner = handle.inner_test
        original_settings = hc.given_settings(fn)
        overrides = hc.TestOverrides(fn)
        # Hypothesis's standard key (pytest's hypothesis plugin, or fuzzdist's for a rank-pool
        # variant, has already set the per-parametrization digest, if any, on inner_test);
        # pinned so the wrapper can't change it.
        key = self.key = hc.function_digest(inner)
        db = campaign.database.db
        prop.database_key = key.hex()
        try:
            adopted = adopt(item, db, key)  # what its pool variants' shared key holds, as plain pytest does
            known = frozenset(db.fetch(key))
        except Exception as exc:  # noqa: BLE001 - Redis gone, a folder unreadable: the campaign's error, said
            prop.status = "error"
            prop.reason = self._unreadable_reason(exc)
            campaign.progress.property_done(state, prop)
            campaign.write_report(html_now=True)
            pytest.fail(prop.reason, pytrace=False)
        if adopted is not None:
            campaign.progress.note(state, adopted)
        prop.stored_before = len(known)
        if campaign.database.too_large(key) and not prop.rounds:  # said at its first visit (BoundedDatabase)
            campaign.progress.note(state, too_large_note(item.nodeid, campaign.database.too_large(key)))
        self.given = set(hc.given_argument_names(fn))
        earlier, prop.known = prop.known, known_bugs.current_tally()  # the fuzzdist plugin's, around this call
        if earlier and prop.known is not None and prop.known is not earlier:  # an earlier visit's sightings
            for bug_id, seen in earlier.sightings.items():
                prop.known.sightings.setdefault(bug_id, seen)
        prop.status, prop.started_at, prop.stop_reason = "running", now, None
        self._sample()
        # A whole property's run is announced as it starts; the adaptive schedule's visits as they end.
        campaign.progress.update(state, force=self.slice_s is None)
        base_phases = tuple(original_settings.phases)
        later_phases = tuple(p for p in base_phases if p not in (Phase.explicit, Phase.reuse))
        try:
            overrides.set_database_key(key)
            handle.inner_test = self.wrap(inner)
            while True:
                stop = self._budget_stop()
                if stop:
                    prop.stop_reason = stop
                    break
                number = prop.rounds + 1
                if number > 1 and Phase.generate not in base_phases:
                    prop.stop_reason = "the test's phases don't generate examples"
                    break
                max_examples = campaign.round_examples
                if state.max_examples is not None:
                    max_examples = min(max_examples, state.max_examples - prop.examples)
                self.round = Round(number, frozenset(prop.failures), known if number == 1 else frozenset())
                overrides.set_settings(
                    Settings(
                        parent=original_settings,
                        max_examples=max_examples,
                        database=db,
                        report_multiple_bugs=True,
                        derandomize=False,
                        print_blob=True,
                        phases=base_phases if number == 1 else later_phases,
                    )
                )
                if campaign.seed is not None:
                    overrides.set_seed(campaign.seed + number - 1)
                prop.rounds = number
                before = prop.examples
                try:
                    fn(**testargs)
                except BudgetSpent:
                    prop.stop_reason = self._budget_stop() or "time budget"
                    break
                except PoolLost as exc:  # not a failure of the property: Hypothesis neither saved nor shrank it
                    self._pool_gone(exc.gone)
                    break
                except CampaignInterrupt as exc:
                    self._interrupted(getattr(exc, "signal_name", "SIGINT"))
                    break
                except KeyboardInterrupt:
                    self._interrupted("SIGINT")
                    break
                except PoolGone as exc:  # raised outside an example (the fuzzdist plugin carries it out of one)
                    self._pool_gone(exc)
                    break
                except DatabaseUnreadable as exc:  # Hypothesis's own read at the round's start: not the property's
                    self._database_unreadable(exc)
                    break
                except OutcomeException as exc:
                    if isinstance(exc, pytest.skip.Exception):  # pytest.skip() inside the property: a skip,
                        prop.status = "skipped"  # not a pass with no example
                        prop.reason = str(exc.msg or "pytest.skip() in the property")
                        raise
                    if not isinstance(exc, Failed):
                        raise  # pytest.xfail() inside the property
                    if campaign.failures.round_raised(item, prop, exc):
                        break
                except BaseException as exc:  # noqa: BLE001 - whatever a round raises is the round's outcome
                    if campaign.failures.round_raised(item, prop, exc):
                        break
                else:
                    if self.round.valid < max_examples and (
                        state.max_examples is None or prop.examples < state.max_examples
                    ):
                        prop.stop_reason = (
                            "too many invalid examples" if prop.invalid > prop.examples else "search space exhausted"
                        )
                        break
                if state.interrupted_by is not None:  # its exception was caught on the way up
                    self._interrupted(state.interrupted_by)
                    break
                if prop.failures:
                    campaign.failures.index(item.nodeid, key)
                    campaign.failures.check_saved(prop, key)
                if prop.examples == before and not self.round.failed:
                    prop.stop_reason = "a round ran no example"
                    break
        finally:
            handle.inner_test = inner
            overrides.restore()
            if prop.failures:
                campaign.failures.index(item.nodeid, key)
                campaign.failures.check_saved(prop, key)
            self.round = None
            prop.elapsed_s += time.monotonic() - now
            prop.started_at = None
            self._sample()
            if prop.status == "running":
                if any(f.kind == "error" for f in prop.failures.values()):
                    prop.status = "error"
                else:
                    prop.status = "failed" if prop.failures else "known" if prop.known_count else "passed"
            if self.slice_s is None:  # a visit of the adaptive schedule is announced done at its last one
                campaign.progress.property_done(state, prop)
            campaign.write_report(html_now=True)
        if prop.failures:
            pytest.fail(failures_text(prop), pytrace=False)
        if prop.pool_gone:
            pytest.fail(prop.reason or "its rank pool can't run examples", pytrace=False)

    def _take_share(self, now: float) -> None:
        """Start the campaign's clock (at its first property) and give this visit its share of the time."""
        state, prop = self.state, self.prop
        if state.duration_s is not None and state.deadline is None:
            # The clock starts with the first property, once its rank pool is up: imports,
            # collection and the first pool's start-up are not part of the budget.
            state.deadline = now + state.duration_s
        if state.deadline is None:
            return
        if now >= state.deadline:
            prop.status, prop.reason = "not run", "the campaign's time was spent before its turn"
            pytest.skip(prop.reason)
        if self.slice_s is not None:  # the adaptive schedule's slice
            prop.share_end = min(state.deadline, now + self.slice_s)
        else:
            waiting = [
                p for p in state.properties.values() if p.status == "pending" and p.nodeid not in self.expected_skips
            ]
            prop.share_end = now + (state.deadline - now) / max(1, len(waiting))
            prop.schedule = {
                "even_share_s": round(prop.share_end - now, 3),
                "why": f"even split: {len(waiting)} properties shared the time left",
            }

    def _budget_stop(self) -> str | None:
        now = time.monotonic()
        state, prop = self.state, self.prop
        if state.deadline is not None:
            assert prop.share_end is not None  # set with the deadline when the property starts
            if now >= state.deadline or now >= prop.share_end:
                return "time budget"
        if state.max_examples is not None and prop.examples >= state.max_examples:
            return "max examples"
        if self.examples_end is not None and prop.examples >= self.examples_end:
            return VISIT_EXAMPLES
        return None

    def _pool_gone(self, exc: PoolGone) -> None:
        """The property's rank pool can't run examples any more (its ranks could not be restarted, or a
        torchrun group is spent): an error of the campaign, said on one line; what the property failed
        with before stays its failure."""
        state, prop = self.state, self.prop
        prop.status, prop.pool_gone = "error", True
        prop.reason = first_line(str(exc))
        prop.stop_reason = "its rank pool is gone"
        self.campaign.progress.stream.write(f"fuzzdist: error: {prop.nodeid}: {prop.reason}\n")
        state.error = state.error or f"{prop.nodeid}: {prop.reason}"

    def _unreadable_reason(self, exc: BaseException) -> str:
        """The one line that says the example database could not be read."""
        cause = exc.error if isinstance(exc, DatabaseUnreadable) else exc
        return f"can't read the example database {self.campaign.database.spec}: {error_line(cause)}"

    def _database_unreadable(self, exc: DatabaseUnreadable) -> None:
        """The example database could not be read once the rounds had started (Hypothesis reads it at the
        start of each run): an error of the campaign, said on one line, never a failure of the property;
        what the property failed with before stays its failure."""
        state, prop = self.state, self.prop
        prop.status, prop.reason = "error", self._unreadable_reason(exc)
        prop.stop_reason = "the example database can't be read"
        self.campaign.progress.stream.write(f"fuzzdist: error: {prop.nodeid}: {prop.reason}\n")
        state.error = state.error or f"{prop.nodeid}: {prop.reason}"

    def _interrupted(self, signal_name: str) -> None:
        state, prop = self.state, self.prop
        state.interrupted_by = state.interrupted_by or signal_name
        state.status = "interrupted"
        prop.status = "interrupted"
        prop.stop_reason = f"interrupted by {signal_name}"
        self.item.session.shouldstop = f"fuzzdist campaign interrupted by {signal_name}"

    # -- the per-example wrapper ------------------------------------------------------------

    def wrap(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        """``inner`` (the test's ``inner_test``), counting each example against the budget and
        recording its events, targets and failure; a failure whose origin the round masks passes."""
        run, state, prop = self, self.state, self.prop

        @functools.wraps(inner)
        def fuzzdist_campaign_example(*args, **kwargs):
            rnd = run.round
            if state.interrupted_by is not None:  # a signal arrived; its exception may have been caught
                raise Terminated(state.interrupted_by)
            if state.deadline is not None:
                now = time.monotonic()
                if now >= state.deadline or (not rnd.failed and now >= prop.share_end):
                    raise BudgetSpent()
            if not rnd.failed and run.examples_end is not None and prop.examples >= run.examples_end:
                raise BudgetSpent()  # the visit ran its examples (a failure found in it is shrunk first)
            warming_up = prop.warmup_s is None  # its first example: the ranks' lazy imports and set-up
            started = time.monotonic()
            hc.record_draws(kwargs)  # what st.data() draws, shown if the example fails and isn't shrunk
            try:
                result = inner(*args, **kwargs)
            except UnsatisfiedAssumption:
                prop.invalid += 1
                raise
            except FAILURE_TYPES as exc:
                if warming_up:
                    run._warmed_up(started)
                prop.examples += 1
                rnd.valid += 1
                masked = run._failed(rnd, exc, kwargs)
                run._after_example()
                if masked:
                    return None
                raise
            if warming_up:
                run._warmed_up(started)
            prop.examples += 1
            rnd.valid += 1
            run._after_example()
            return result

        return fuzzdist_campaign_example

    def _failed(self, rnd: Round, exc: BaseException, kwargs: dict[str, Any]) -> bool:
        """Hand a failing example to the failure log; True if its origin is masked (counts as a pass)."""
        masked = self.campaign.failures.example_failed(
            self.item, self.prop, exc, kwargs, self.given, mask=rnd.mask, known_entries=rnd.known_entries, key=self.key
        )
        if not masked:
            rnd.failed = True
        return masked

    def _warmed_up(self, started: float) -> None:
        """A property's first example pays what the ranks do once for it (e.g. importing DTensor: seconds
        on a 4-rank pool); like the pool's start-up, it is not charged to the time budget."""
        took = time.monotonic() - started
        prop = self.prop
        prop.warmup_s = took
        if prop.share_end is not None:
            prop.share_end += took
        if self.state.deadline is not None:
            self.state.deadline += took
        self.campaign.next_report = 0.0  # the report shows the property running at once (a --jobs parent reads it)

    def _after_example(self) -> None:
        prop = self.prop
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
        self._sample()
        campaign = self.campaign
        campaign.progress.update(self.state)
        if now >= campaign.next_report:
            campaign.write_report()

    def _sample(self) -> None:
        """A point of the property's time series (kept at most once a series interval)."""
        prop = self.prop
        prop.series.add(self.state.elapsed(), prop.examples, prop.invalid, len(prop.failures))
