"""The distinct failures a campaign found in each property, one :class:`FailureRecord` per origin.

Failures are told apart by Hypothesis's InterestingOrigin (exception type
and raising site, with its chain: a RankError carries the remote site), the
same way Hypothesis does.  A record is made the moment its first failing
example is raised (:meth:`FailureLog.example_failed`), follows the examples
Hypothesis shrinks it through, and takes the minimal example, the
traceback and the ``@reproduce_failure`` blob when the round raises it
(:meth:`FailureLog.round_raised`).  Each record keeps the choice sequences
it was seen with, and :meth:`FailureLog.check_saved` reads them back from
the database: a failure the database did not keep is said on one line, and
its record keeps a command that replays it with no database.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, cast

from hypothesis.errors import Flaky, HypothesisException

from fuzzdist.campaign.database import Database, record_in_index, replay_command, reproduce_command
from fuzzdist.campaign.progress import Progress
from fuzzdist.campaign.report import CampaignState, FailureRecord, PropertyState
from fuzzdist.compat import hypothesis_internals as hc

if sys.version_info < (3, 11):  # Hypothesis depends on the backport there
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup


class FailureLog:
    """Records each property's distinct failures in its ``PropertyState.failures``, announces the new
    ones on ``progress``, notes in the database index which test a key belongs to, and calls
    ``write_report`` whenever the records change."""

    def __init__(
        self,
        state: CampaignState,
        database: Database,
        progress: Progress,
        pytest_options: Sequence[str],
        write_report: Callable[[], None],
    ) -> None:
        self.state = state
        self.database = database
        self.progress = progress
        self.pytest_options = pytest_options  # what a reproducing pytest command needs
        self._write_report = write_report
        self._indexed: set[str] = set()

    def example_failed(
        self,
        item: Any,
        prop: PropertyState,
        exc: BaseException,
        kwargs: dict[str, Any],
        given: Collection[str],
        *,
        mask: frozenset[str],
        known_entries: frozenset[bytes],
        key: bytes | None,
    ) -> bool:
        """Record a failing example as it happens; True if its origin is in ``mask`` (the origins found
        in earlier rounds: it counts as a pass).  ``known_entries``: the failing examples stored before
        the round (bytes), to tell a replay from a new find; ``key``: the property's database key."""
        origin = failure_origin(exc)
        record = prop.failures.get(origin)
        if record is not None:
            record.occurrences += 1
            if origin in mask:
                return True
            if not record.shrunk:  # Hypothesis is shrinking it: keep the latest (smallest) example
                record.example, record.summary = example_text(item, kwargs, given), summary(exc)
                record.hang = hang(exc) or record.hang
                self._seen_with(item, record, hc.current_example_bytes())
            return False
        example = example_text(item, kwargs, given)
        from_database = False
        if known_entries:
            from_database = hc.current_example_bytes() in known_entries
        record = FailureRecord(
            origin=origin,
            kind="failure",
            summary=summary(exc),
            example=example,
            traceback="".join(traceback.format_exception(exc)),
            reproduce=reproduce_command(item.nodeid, self.database, self.pytest_options),
            found_after_examples=prop.examples,
            found_after_s=round(self.state.elapsed(), 3),
            from_database=from_database,
            hang=hang(exc),
        )
        prop.failures[origin] = record
        self._seen_with(item, record, hc.current_example_bytes())
        self.index(item.nodeid, key)
        self.progress.new_failure(self.state, prop, record.summary, from_database)
        self._write_report()
        return False

    def round_raised(self, item: Any, prop: PropertyState, exc: BaseException) -> bool:
        """Take in the (shrunk) failures a round raised; True if the property can't go on."""
        stop = False
        for leaf in leaves(exc):
            if isinstance(leaf, KeyboardInterrupt):  # an interrupt Hypothesis grouped with failures
                continue
            origin = failure_origin(leaf)
            if isinstance(leaf, Flaky):
                kind = "flaky"
            elif isinstance(leaf, HypothesisException):
                kind, stop = "error", True
            else:
                kind = "failure"
            record = prop.failures.get(origin)
            if record is None:
                record = FailureRecord(
                    origin=origin,
                    kind=kind,
                    summary=summary(leaf),
                    example="",
                    reproduce=reproduce_command(item.nodeid, self.database, self.pytest_options),
                    found_after_examples=prop.examples,
                    found_after_s=round(self.state.elapsed(), 3),
                )
                prop.failures[origin] = record
                self.progress.new_failure(self.state, prop, record.summary, False)
            record.kind = kind
            record.summary = summary(leaf)
            record.hang = hang(leaf) or record.hang
            notes = [str(n) for n in getattr(leaf, "__notes__", ())]
            record.example = hc.printed_example(notes) or record.example or "(no example: " + kind + ")"
            record.shrunk = kind != "error"
            if record.shrunk and record.shrunk_after_s is None:
                record.shrunk_after_s = round(self.state.elapsed(), 3)
            record.traceback = "".join(traceback.format_exception(leaf))
            record.reproduce_failure = hc.reproduce_failure_from_notes(notes)
            blob = hc.blob_from_decorator(record.reproduce_failure)
            entry = hc.entry_from_blob(blob) if blob else None
            if blob and entry is not None:  # the minimal example, as Hypothesis saved it
                record.entries = (entry,)
                record.replay = replay_command(item.nodeid, blob, self.pytest_options)
            if kind == "error":
                prop.status = "error"
                prop.reason = record.summary
        self._write_report()
        return stop

    def _seen_with(self, item: Any, record: FailureRecord, entry: bytes | None) -> None:
        """``record``'s failure was raised by the example ``entry`` (its choice sequence): Hypothesis saves
        the first one of an origin, then each smaller one, moving the one it replaces aside."""
        if entry is None:
            return
        record.entries = (record.entries[0], entry) if record.entries else (entry,)
        blob = hc.reproduce_failure_blob(entry)
        if blob is not None:
            record.replay = replay_command(item.nodeid, blob.decode("ascii"), self.pytest_options)

    def check_saved(self, prop: PropertyState, key: bytes | None) -> None:
        """Read each failure of ``prop`` back from the database under ``key``: one that is not there is
        said once, on one line, and marked (``saved``), so the report and the exit code say it."""
        if key is None:
            return
        changed = False
        for record in prop.failures.values():
            if not record.entries:
                continue
            why = self.database.not_kept(key, record.entries)
            was, record.saved, record.not_saved = record.saved, why is None, why
            if why is not None and record.replay:  # what every output shows as the way to reproduce it
                record.reproduce = record.replay
            if why is not None and was is not False:
                changed = True
                self.progress.stream.write(
                    f"fuzzdist: warning: the example database {self.database.spec} did not "
                    f"keep a failure of {prop.nodeid} ({why}); the report keeps it: "
                    f"{record.replay}\n"
                )
        if changed:
            self._write_report()

    def index(self, nodeid: str, key: bytes | None) -> None:
        """Note in the database which test ``key`` belongs to (once per property)."""
        if nodeid in self._indexed or key is None:
            return
        self._indexed.add(nodeid)
        try:
            record_in_index(self.database.db, key, nodeid)
        except Exception as exc:  # noqa: BLE001 - the failure itself is saved; only the index entry is missing
            self.progress.stream.write(f"fuzzdist: warning: can't update the database index: {exc}\n")


def failure_origin(exc: BaseException) -> str:
    """Hypothesis's InterestingOrigin of a failure, on one line: what tells distinct failures apart."""
    return "; ".join(line.strip() for line in hc.interesting_origin(exc).splitlines())


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The distinct failures in what a round raised (Hypothesis groups several in an ExceptionGroup)."""
    if type(exc) in (BaseExceptionGroup, ExceptionGroup):  # not subclasses: Hypothesis's Flaky* are one
        for sub in cast(BaseExceptionGroup, exc).exceptions:
            yield from leaves(sub)
    else:
        yield exc


def example_text(item: Any, kwargs: dict[str, Any], given: Collection[str]) -> str:
    """The drawn arguments of an example as a call, then what its ``st.data()`` arguments drew, as
    Hypothesis prints them (until Hypothesis prints the shrunk one)."""
    shown = ", ".join(f"{name}={value!r}" for name, value in kwargs.items() if name in given)
    draws = hc.drawn_lines({name: value for name, value in kwargs.items() if name in given})
    return "\n".join([f"{getattr(item, 'originalname', item.name)}({shown[:4000]})", *draws])


def hang(exc: BaseException) -> dict | None:
    """Why the ranks hung, for a RankTimeout (or a RankError whose other ranks were left waiting)."""
    diagnosis = getattr(exc, "diagnosis", None)
    return diagnosis.to_dict() if diagnosis is not None else None


def summary(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    return f"{type(exc).__name__}: {first_line(str(exc))}".rstrip(": ")


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped, at most 300 characters."""
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def failures_text(prop: PropertyState) -> str:
    """What a property's test fails with at the end of its campaign: each distinct failure, its
    minimal example, how to reproduce it, and its traceback."""
    parts = [
        f"fuzzdist campaign found {len(prop.failures)} distinct failure(s) in {prop.nodeid} "
        f"after {prop.examples:,} examples"
    ]
    for i, failure in enumerate(prop.failures.values(), 1):
        parts.append(
            f"\n[{i}] {failure.summary}\n    where: {failure.origin}\n    minimal example:\n"
            + "\n".join("        " + line for line in failure.example.splitlines())
            + f"\n    reproduce: {failure.reproduce}\n\n{failure.traceback}"
        )
    return "\n".join(parts)
