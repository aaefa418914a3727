"""``fuzzdist run --jobs N``: merge the JSON reports of N campaign workers into one, in the N=1 format.

Pure functions on report dicts (no processes): the parent reads each worker's report (rewritten
atomically on every new failure and every few seconds) and merges them; a property that several workers
fuzzed (fewer properties than workers) is one entry with its counts added up and its failures united by
origin.  :func:`state_from_report` rebuilds a :class:`CampaignState` from a report, so the parent's
progress display and summary are the same code as a single campaign's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from fuzzdist.campaign.coverage_report import merge_sections
from fuzzdist.campaign.report import CampaignState, FailureRecord, PropertyState

# When workers disagree about a property's status, the most telling one wins.
STATUS_ORDER = ("error", "failed", "interrupted", "known", "running", "passed", "skipped", "not run", "pending")


def merge_properties(entries: Sequence[dict]) -> dict:
    """One property's entries from several workers' reports, as one entry."""
    first = entries[0]
    if len(entries) == 1:
        return dict(first)
    merged = dict(first)
    for key in ("examples", "invalid_examples", "rounds", "known_sightings", "visits"):
        merged[key] = sum(int(e.get(key) or 0) for e in entries)
    merged["elapsed_s"] = max(float(e.get("elapsed_s") or 0) for e in entries)  # they ran at the same time
    merged["startup_s"] = max(float(e.get("startup_s") or 0) for e in entries)
    merged["warmup_s"] = max((float(e["warmup_s"]) for e in entries if e.get("warmup_s") is not None), default=None)
    merged["examples_per_s"] = round(merged["examples"] / merged["elapsed_s"], 2) if merged["elapsed_s"] else 0.0
    merged["stored_failures_at_start"] = max(int(e.get("stored_failures_at_start") or 0) for e in entries)
    merged["status"] = min((e.get("status", "pending") for e in entries), key=_status_rank)
    merged["stop_reason"] = "; ".join(dict.fromkeys(str(e["stop_reason"]) for e in entries if e.get("stop_reason")))
    merged["reason"] = "; ".join(dict.fromkeys(str(e["reason"]) for e in entries if e.get("reason"))) or None
    failures: dict[str, dict] = {}
    for entry in entries:
        for failure in entry.get("failures", []):
            seen = failures.get(failure["origin"])
            if seen is None:
                failures[failure["origin"]] = dict(failure)
            else:
                seen["occurrences"] = seen.get("occurrences", 1) + failure.get("occurrences", 1)
                # keep one the database kept over one it did not (the database is shared), then the shrunk example
                if _kept_rank(failure) > _kept_rank(seen):
                    failures[failure["origin"]] = {**failure, "occurrences": seen["occurrences"]}
    merged["failures"] = list(failures.values())
    merged["distinct_failures"] = len(failures)
    events: Counter = Counter()
    targets: dict[str, float] = {}
    known: dict[str, dict] = {}
    pairs: dict[tuple[str, str], Counter] = {}
    for entry in entries:
        events.update(entry.get("events", {}))
        for label, score in entry.get("targets", {}).items():
            targets[label] = max(score, targets.get(label, score))
        for bug in entry.get("known_bugs", []):
            if bug["id"] in known:
                known[bug["id"]]["count"] += bug.get("count", 0)
            else:
                known[bug["id"]] = dict(bug)
        for grid in entry.get("event_pairs", []):
            cells = pairs.setdefault((grid["x"], grid["y"]), Counter())
            for va, vb, n in grid["cells"]:
                cells[(va, vb)] += n
    merged["events"] = dict(events.most_common())
    merged["targets"] = targets
    merged["known_bugs"] = list(known.values())
    merged["event_pairs"] = [
        {"x": a, "y": b, "cells": [[va, vb, n] for (va, vb), n in sorted(grid.items())]}
        for (a, b), grid in sorted(pairs.items())
    ]
    merged["event_pairs_dropped"] = sum(int(e.get("event_pairs_dropped") or 0) for e in entries)
    merged["rank_output"] = [item for e in entries for item in e.get("rank_output", [])]
    # the series of the worker that ran most examples (series of workers' own clocks don't add up)
    merged["series"] = max(entries, key=lambda e: e.get("examples", 0)).get("series", first.get("series"))
    merged["schedule"] = {
        "per_worker": [e.get("schedule", {}) for e in entries],
        "why": "; ".join(
            dict.fromkeys(str(e.get("schedule", {}).get("why")) for e in entries if e.get("schedule", {}).get("why"))
        ),
    }
    return merged


def merge_reports(base: dict, reports: Sequence[dict | None], workers: list[dict]) -> dict:
    """The campaign's report: ``base`` (the parent's own fields: command, status, budget, ...) with the
    properties of every worker's latest ``reports`` (None: none written yet) merged, the totals over them,
    and ``workers`` (one entry per worker: index, pid, seed, status, what happened to it)."""
    by_nodeid: dict[str, list[dict]] = {}
    for index, report in enumerate(reports):
        for prop in (report or {}).get("properties", []):
            by_nodeid.setdefault(prop["nodeid"], []).append({**prop, "worker": index})
    properties = []
    for entries in by_nodeid.values():
        prop = merge_properties(entries)
        prop["workers"] = [e["worker"] for e in entries]
        prop.pop("worker", None)
        properties.append(prop)
    done = [r for r in reports if r]
    data = dict(base)
    for key in ("format", "fuzzdist_version", "hypothesis_version", "torch_version", "updated"):
        if done and key in done[0]:
            data.setdefault(key, done[0][key])
    data["properties"] = properties
    data["totals"] = {
        "properties": len(properties),
        "examples": sum(p.get("examples", 0) for p in properties),
        "distinct_failures": sum(len(p.get("failures", [])) for p in properties),
        "failures_not_saved": sum(1 for p in properties for f in p.get("failures", []) if f.get("saved") is False),
        "failing_properties": sum(1 for p in properties if p.get("failures")),
        "known_sightings": sum(p.get("known_sightings", 0) for p in properties),
        "known_bugs": sorted({b["id"] for p in properties for b in p.get("known_bugs", [])}),
        "properties_with_known_bugs": sum(1 for p in properties if p.get("known_sightings")),
    }
    data["workers"] = workers
    coverage = merge_sections([r.get("coverage") for r in done])
    if coverage is not None:  # --cover: the workers' lines, united
        data["coverage"] = coverage
    return data


def _kept_rank(failure: dict) -> tuple[bool, bool]:
    """Which of two workers' records of one failure the merge keeps: the higher (kept in the database
    first, then shrunk)."""
    return failure.get("saved") is not False, bool(failure.get("shrunk"))


def _status_rank(status: str) -> int:
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


class KnownFromReport:
    """A report's ``known_bugs`` list with the part of :class:`fuzzdist.known_bugs.Tally` that the
    summary and the progress display use."""

    def __init__(self, bugs: list[dict]) -> None:
        self.bugs = bugs

    def __bool__(self) -> bool:
        return bool(self.bugs)

    @property
    def total(self) -> int:
        return sum(int(b.get("count", 0)) for b in self.bugs)

    def lines(self) -> list[str]:
        """One line per bug, as :meth:`fuzzdist.known_bugs.Tally.lines` writes them: id, count, kind,
        summary, upstream; then the first example that showed it and its failure."""
        out = []
        for b in self.bugs:
            upstream = f" ({b['upstream']})" if b.get("upstream") else ""
            # the entry's kind as the Tally's lines show it; a report written before entries had one has none
            kind = f" [{b['kind']}]" if b.get("kind") else ""
            out.append(f"KNOWN {b['id']} x{b.get('count', 0)}{kind}: {b.get('summary', '')}{upstream}")
            out.append(f"    first seen on: {b.get('example', '')}")
            out.append(f"    failure: {b.get('failure', '')}")
        return out

    def as_json(self) -> list[dict[str, Any]]:
        return self.bugs


def state_from_report(data: dict, state: CampaignState) -> CampaignState:
    """Fill ``state`` (the parent's: its clock, budget and status) with the properties of a merged report."""
    fields = set(FailureRecord.__dataclass_fields__)
    properties = {}
    for p in data.get("properties", []):
        prop = PropertyState(
            p["nodeid"],
            status=p.get("status", "pending"),
            examples=p.get("examples", 0),
            invalid=p.get("invalid_examples", 0),
            rounds=p.get("rounds", 0),
            elapsed_s=p.get("elapsed_s", 0.0),
            stop_reason=p.get("stop_reason") or None,
            reason=p.get("reason"),
            database_key=p.get("database_key"),
            stored_before=p.get("stored_failures_at_start", 0),
            events=Counter(p.get("events", {})),
            targets=dict(p.get("targets", {})),
            startup_s=p.get("startup_s", 0.0),
            visits=p.get("visits", 0),
            schedule=p.get("schedule", {}),
            rank_output=p.get("rank_output", []),
            known=KnownFromReport(p.get("known_bugs", [])),
        )
        prop.failures = {
            f["origin"]: FailureRecord(**{k: v for k, v in f.items() if k in fields}) for f in p.get("failures", [])
        }
        properties[prop.nodeid] = prop
    state.properties = properties
    return state
