"""A campaign's state, its JSON report (always valid on disk) and its summary table."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from fuzzdist.campaign.output import write_output
from fuzzdist.campaign.plain_text import plain
from fuzzdist.campaign.series import EventPairs, TimeSeries

REPORT_FORMAT = 1
HTML_COST_SHARE = 0.02  # the HTML page is rewritten no oftener than keeps its rendering under 2% of the time
REPORT_INTERVAL_S = 5.0  # the JSON report (and at most the HTML page) is rewritten this often


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class FailureRecord:
    """One distinct failure (one Hypothesis InterestingOrigin) of one property."""

    origin: str
    kind: str  # "failure", "flaky" (failed once, then passed) or "error" (the property itself is broken)
    summary: str  # "RankError: rank 1 raised (rank 1: ValueError: ...)"
    example: str  # the (shrunk, once `shrunk`) failing example, as Hypothesis prints it
    traceback: str = ""
    reproduce_failure: str | None = None  # the @reproduce_failure(...) decorator Hypothesis printed
    reproduce: str = ""  # one pytest command that replays it from the database
    found_after_examples: int = 0  # examples this property had run when it was first seen
    found_after_s: float = 0.0  # seconds into the campaign
    from_database: bool = False  # found by an earlier run: replayed from the database (not a known torch bug)
    shrunk: bool = False  # Hypothesis finished shrinking it
    shrunk_after_s: float | None = None  # seconds into the campaign when its shrinking ended
    occurrences: int = 1  # failing examples with this origin
    hang: dict | None = None  # why the ranks hung (fuzzdist.pool.hangs.Diagnosis.to_dict()), for a hang
    replay: str = ""  # one command that replays its example with no database (fuzzdist replay --blob)
    saved: bool | None = None  # read back from the database (None: not checked, or nothing to read back)
    not_saved: str | None = None  # why the database did not keep it (with saved False)
    # the choice sequences it was seen with (first, latest), to read back; in the report as their blobs
    entries: tuple[bytes, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict:
        from fuzzdist.compat.hypothesis_internals import reproduce_failure_blob

        data = dict(self.__dict__)
        # as @reproduce_failure blobs: what a --jobs parent reads back when the worker that found it dies
        data["blobs"] = [blob.decode("ascii") for e in data.pop("entries") if (blob := reproduce_failure_blob(e))]
        return data


@dataclass
class PropertyState:
    nodeid: str
    # pending, running, passed, known (no failure, but known torch bugs seen), failed, error, skipped,
    # interrupted, not run
    status: str = "pending"
    examples: int = 0  # examples executed (passing and failing; shrinking included)
    invalid: int = 0  # examples rejected by assume() or a filter
    rounds: int = 0
    elapsed_s: float = 0.0
    stop_reason: str | None = None
    reason: str | None = None  # why skipped / errored
    database_key: str | None = None
    stored_before: int = 0  # failing examples stored under its key when the campaign started
    events: Counter = field(default_factory=Counter)  # Hypothesis event() labels -> examples
    targets: dict = field(default_factory=dict)  # target() label -> best score
    failures: dict[str, FailureRecord] = field(default_factory=dict)  # by origin
    started_at: float | None = None  # monotonic
    share_end: float | None = None  # monotonic: when its share of the time budget ends
    budget_examples: int | None = None
    rank_output: list = field(default_factory=list)  # what the ranks wrote in passing examples (OutputLog.entries)
    series: TimeSeries = field(default_factory=TimeSeries)  # (t_s, examples, invalid, distinct failures) over time
    event_pairs: EventPairs = field(default_factory=EventPairs)  # event() values reached in one example together
    known: Any = None  # its fuzzdist.known_bugs.Tally: sightings of known torch bugs, counted, not failures
    startup_s: float = 0.0  # time in its set-up (its rank pool's start-up): not charged to the budget
    warmup_s: float | None = None  # its first example's time (the ranks' one-off work): not charged either
    visits: int = 0  # slices it ran (the adaptive schedule visits a property several times)
    target_gains: int = 0  # times a target() label's best score improved
    schedule: dict = field(default_factory=dict)  # the time the schedule gave it and why
    pool_gone: bool = False  # its rank pool could not go on (could not restart its ranks): `reason` says why

    @property
    def known_count(self) -> int:
        """Sightings of known torch bugs (examples whose only failure was a known bug)."""
        return self.known.total if self.known else 0

    @property
    def examples_per_s(self) -> float:
        elapsed = self.current_elapsed()
        return self.examples / elapsed if elapsed > 0 else 0.0

    def current_elapsed(self) -> float:
        if self.status == "running" and self.started_at is not None:
            return self.elapsed_s + time.monotonic() - self.started_at
        return self.elapsed_s

    def time_left(self) -> float | None:
        if self.status != "running" or self.share_end is None:
            return None
        return max(0.0, self.share_end - time.monotonic())

    def examples_left(self) -> int | None:
        if self.budget_examples is None:
            return None
        return max(0, self.budget_examples - self.examples)

    def to_dict(self) -> dict:
        return {
            "nodeid": self.nodeid,
            "status": self.status,
            "examples": self.examples,
            "invalid_examples": self.invalid,
            "examples_per_s": round(self.examples_per_s, 2),
            "elapsed_s": round(self.current_elapsed(), 3),
            "rounds": self.rounds,
            "startup_s": round(self.startup_s, 3),
            "warmup_s": None if self.warmup_s is None else round(self.warmup_s, 3),
            "visits": self.visits,
            "schedule": self.schedule,
            "stop_reason": self.stop_reason,
            "reason": self.reason,
            "database_key": self.database_key,
            "stored_failures_at_start": self.stored_before,
            "distinct_failures": len(self.failures),
            "failures": [f.to_dict() for f in self.failures.values()],
            "known_sightings": self.known_count,
            "known_bugs": self.known.as_json() if self.known else [],
            "events": dict(self.events.most_common()),
            "targets": dict(self.targets),
            "rank_output": self.rank_output,
            "series": self.series.to_dict(),
            "event_pairs": self.event_pairs.to_list(),
            "event_pairs_dropped": self.event_pairs.dropped,
        }


@dataclass
class CampaignState:
    command: list[str]
    device: str | None
    database: str
    duration_s: float | None
    max_examples: int | None
    world_size: int | None
    properties: dict[str, PropertyState] = field(default_factory=dict)
    status: str = "starting"  # starting, running, finished, interrupted, error
    interrupted_by: str | None = None
    error: str | None = None
    started_wall: str = field(default_factory=now_iso)
    started: float = field(default_factory=time.monotonic)
    finished_wall: str | None = None
    deadline: float | None = None  # monotonic
    worker: dict | None = None  # as a `fuzzdist run --jobs` worker: its index, seed and properties

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def time_left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def failure_count(self) -> int:
        return sum(len(p.failures) for p in self.properties.values())

    def not_kept(self) -> int:
        """Failures found that the example database did not keep (the report has their replay command)."""
        return sum(1 for p in self.properties.values() for f in p.failures.values() if f.saved is False)

    def errored(self) -> bool:
        return self.status == "error" or any(p.status == "error" for p in self.properties.values())

    def to_dict(self) -> dict:
        import hypothesis
        import torch

        import fuzzdist

        return {
            "format": REPORT_FORMAT,
            "fuzzdist_version": fuzzdist.__version__,
            "hypothesis_version": hypothesis.__version__,
            "torch_version": torch.__version__,
            "command": self.command,
            "status": self.status,
            "interrupted_by": self.interrupted_by,
            "error": self.error,
            "started": self.started_wall,
            "updated": now_iso(),
            "finished": self.finished_wall,
            "elapsed_s": round(self.elapsed(), 3),
            "budget": {"duration_s": self.duration_s, "max_examples_per_property": self.max_examples},
            "device": self.device,
            "world_size": self.world_size,
            "database": self.database,
            "totals": {
                "properties": len(self.properties),
                "examples": sum(p.examples for p in self.properties.values()),
                "distinct_failures": self.failure_count(),
                "failures_not_saved": self.not_kept(),
                "failing_properties": sum(1 for p in self.properties.values() if p.failures),
                "known_sightings": sum(p.known_count for p in self.properties.values()),
                "known_bugs": sorted({b["id"] for p in self.properties.values() if p.known for b in p.known.as_json()}),
                "properties_with_known_bugs": sum(1 for p in self.properties.values() if p.known_count),
            },
            "properties": [p.to_dict() for p in self.properties.values()],
            **({"worker": self.worker} if self.worker is not None else {}),
        }


def write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` so that a reader only ever sees a complete file."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader only ever sees a complete file, through nothing planted
    in its folder (:func:`fuzzdist.campaign.output.write_output`)."""
    write_output(path, text)


# ---------------------------------------------------------------------------------------
# Text formatting shared by the progress display and the summary.


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def fmt_left(prop: PropertyState) -> str:
    parts = []
    time_left = prop.time_left()
    if time_left is not None:
        parts.append(fmt_seconds(time_left))
    examples_left = prop.examples_left()
    if examples_left is not None and prop.status == "running":
        parts.append(f"{examples_left:,} ex")
    return " / ".join(parts) or "-"


def fmt_events(events: Counter, limit: int = 3) -> str:
    if not events:
        return ""
    top = ", ".join(f"{label} x{count}" for label, count in events.most_common(limit))
    more = len(events) - limit
    return top + (f" (+{more} more)" if more > 0 else "")


def summary_text(
    state: CampaignState,
    report_path: str | None,
    junit_path: str | None,
    html_path: str | None = None,
    write_errors: Mapping[str, str] | None = None,
) -> str:
    """The end-of-campaign summary: a table, then each failure with its minimal example, then the reports
    written; one whose latest write failed (``write_errors``: "json"/"html"/"junit" -> why) is marked so."""
    rows = [("property", "status", "examples", "ex/s", "failures", "known", "stopped because")]
    for prop in state.properties.values():
        why = prop.stop_reason or prop.reason or ""
        rows.append(
            (
                prop.nodeid,
                prop.status,
                f"{prop.examples:,}",
                f"{prop.examples_per_s:.1f}",
                str(len(prop.failures)),
                str(prop.known_count),
                why if len(why) <= 60 else why[:57] + "...",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        f"fuzzdist campaign {state.status}"
        + (f" by {state.interrupted_by}" if state.interrupted_by else "")
        + f" after {fmt_seconds(state.elapsed())}: "
        + f"{sum(p.examples for p in state.properties.values()):,} examples, "
        + f"{state.failure_count()} distinct failure(s) in {len(state.properties)} properties"
        + (f", {lost} NOT SAVED in the example database" if (lost := state.not_kept()) else "")
        + (
            f", {sightings} sighting(s) of known torch bugs"
            if (sightings := sum(p.known_count for p in state.properties.values()))
            else ""
        )
    ]
    for i, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.ljust(widths[j]) if j in (0, 1, 6) else cell.rjust(widths[j]) for j, cell in enumerate(row)
            ).rstrip()
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    for prop in state.properties.values():
        if prop.events:
            lines.append(f"events in {prop.nodeid}: {fmt_events(prop.events, limit=8)}")
    shares = [(prop.nodeid, prop.schedule["why"]) for prop in state.properties.values() if prop.schedule.get("why")]
    if shares:
        lines.append("")
        lines.append("time per property (pool start-up and first example not counted):")
        lines.extend(f"  {nodeid}: {why}" for nodeid, why in shares)
    for prop in state.properties.values():
        if prop.known_count:
            lines.append("")
            lines.append(f"known torch bugs in {prop.nodeid} (counted, not failures):")
            lines.extend("  " + line for line in prop.known.lines())
    n = 0
    for prop in state.properties.values():
        for failure in prop.failures.values():
            n += 1
            lines.append("")
            replayed = " (replayed from the database: found by an earlier run)" if failure.from_database else ""
            lines.append(f"[{n}] {prop.nodeid}: {failure.summary}{replayed}")
            lines.append(f"    where: {failure.origin}")
            if failure.hang:
                lines.append(f"    why it hung ({failure.hang['kind']}): {failure.hang['summary']}")
                lines.extend(f"        rank {r}: {where}" for r, where in failure.hang["ranks"].items())
            if failure.kind == "error":
                lines.append("    the property itself is broken (Hypothesis could not run it); fix it and run again")
            else:
                lines.append(
                    "    minimal example:"
                    if failure.shrunk
                    else "    smallest example so far (its shrinking did not finish):"
                    if failure.saved is False  # nothing in the database for a next run to go on from
                    else "    smallest example so far (its rank pool could not go on shrinking it; the database "
                    "keeps it, and the next run goes on shrinking):"
                    if prop.pool_gone
                    else "    smallest example so far (the time ran out while shrinking; the database keeps "
                    "it, and the next run goes on shrinking):"
                )
                lines.extend("        " + line for line in failure.example.splitlines())
            if failure.saved is False:
                lines.append(f"    NOT SAVED in the example database ({failure.not_saved}); replay it from here:")
                lines.append(f"    reproduce: {failure.replay or '(no replay command: Hypothesis printed no blob)'}")
            else:
                lines.append(f"    reproduce: {failure.reproduce}")
    if state.error:
        lines.append(f"\nerror: {state.error}")
    if report_path or junit_path or html_path:
        lines.append("")
        failed = write_errors or {}
        for path, what, label in ((report_path, "json", "JSON report"), (html_path, "html", "HTML report")):
            if path and what in failed:
                lines.append(f"{label}: {path} NOT WRITTEN ({failed[what]})")
            elif path:
                lines.append(f"{label}: {path}")
        if junit_path and "junit" in failed:
            lines.append(f"JUnit XML:   {junit_path} NOT WRITTEN ({failed['junit']})")
        elif junit_path:
            lines.append(f"JUnit XML:   {junit_path}")
    # Examples and messages hold drawn values (from a shared database, too): plain text on a terminal.
    return plain("\n".join(lines))
