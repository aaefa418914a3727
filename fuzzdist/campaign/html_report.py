"""The campaign's HTML report: one self-contained page made from the JSON report.

The page fetches nothing (CSS inline, charts inline SVG, no script), so it can
be mailed, archived as a CI artefact or opened from disk.  It shows, per
property, the examples and examples per second over time, the distinct
failures with their minimal examples and reproducing commands, and the
coverage of the drawn inputs: the ``event()`` values reached and, for each
pair of event keys (dtype x layout, ...), a grid whose empty cells are the
pairs no example reached.  Sightings of known torch bugs (``fuzzdist.known_bugs``:
counted, not failures) are shown apart from the failures: in the headline, per
property, and in a section listing each bug.  Every user-derived string is escaped.

What is drawn is bounded, whatever the report holds: at most :data:`MAX_GRID_CELLS` cells of
pair grids per property and :data:`MAX_PAGE_GRID_CELLS` on the page (the pairs past them are
named, not drawn), and an axis value is shown in at most :data:`MAX_VALUE_CHARS` characters.
"""

from __future__ import annotations

import functools
import html
import math
import re
import time
from collections.abc import Iterable, Sequence

from fuzzdist.campaign import coverage_report
from fuzzdist.campaign.charts import xy_chart
from fuzzdist.campaign.plain_text import encodable
from fuzzdist.campaign.report import HTML_COST_SHARE, REPORT_FORMAT, REPORT_INTERVAL_S, fmt_seconds, write_text_atomic
from fuzzdist.campaign.series import split_event
from fuzzdist.errors import BadReport

REFRESH_S = 30  # a running campaign's page reloads itself this often (fuzzdist run rewrites it)
OPEN_GRIDS = 4  # pair grids shown open per property; the others are folded
MAX_AXIS_VALUES = 40  # rows or columns of one grid; past it the least reached values are left out
# A grid's cells cost the page about 200 bytes each, and a few bytes of event_pairs can ask for
# thousands: past these, grids are named and not drawn (a campaign's own grids need far fewer).
MAX_GRID_CELLS = 10_000  # per property
MAX_PAGE_GRID_CELLS = 50_000  # on the whole page
MAX_VALUE_CHARS = 80  # an event value longer than this is cut in a grid's headers
# Pairs a reader looks for first, when the property reached them (the others follow, folded).
PAIR_ORDER = (
    ("dtype", "layout"),
    ("dtype", "pattern"),
    ("layout", "ndim"),
    ("sharing", "dtype"),
    ("sharing", "layout"),
    ("allocator", "dtype"),
    ("completion", "completion-has"),
    ("ddp-depth", "ddp-batches"),
)


def check_report(report: object) -> dict:
    """``report`` if it looks like a JSON report of ``fuzzdist run``; BadReport saying why not.

    Every field the page reads is checked for its type (a number where a number is formatted, a list
    where one is walked), so that a damaged or hand-edited report is one line naming the field, not a
    traceback; what the page prints of it is escaped either way.
    """
    if not isinstance(report, dict) or not isinstance(report.get("properties"), list) or "format" not in report:
        raise BadReport(
            "it is not a fuzzdist campaign report (no 'format' and 'properties'): pass the file "
            "fuzzdist run wrote with --report"
        )
    if not _is_int(report["format"]) or report["format"] > REPORT_FORMAT:
        raise BadReport(
            f"its format {report['format']!r} is newer than this fuzzdist reads ({REPORT_FORMAT}): upgrade fuzzdist"
        )
    _fields(report, "", _REPORT_FIELDS)
    for name, sub in (("totals", _TOTALS_FIELDS), ("budget", _BUDGET_FIELDS)):
        if report.get(name) is not None:
            _fields(report[name], f"{name}.", sub)
    for i, prop in enumerate(report["properties"]):
        where = f"properties[{i}]."
        _fields(prop, where, _PROPERTY_FIELDS)
        for j, failure in enumerate(prop.get("failures") or []):
            _fields(failure, f"{where}failures[{j}].", _FAILURE_FIELDS)
            if failure.get("hang") is not None:
                _fields(failure["hang"], f"{where}failures[{j}].hang.", {"ranks": dict})
        for label, n in (prop.get("events") or {}).items():
            if not _is_int(n):
                raise _bad(f"{where}events[{label!r}]", "a whole number", n)
        for j, pair in enumerate(prop.get("event_pairs") or []):
            _fields(pair, f"{where}event_pairs[{j}].", {"x": str, "y": str, "cells": list})
            for k, cell in enumerate(pair.get("cells") or []):
                if not (
                    isinstance(cell, list)
                    and len(cell) == 3
                    and isinstance(cell[0], str)
                    and isinstance(cell[1], str)
                    and _is_int(cell[2])
                ):
                    raise _bad(f"{where}event_pairs[{j}].cells[{k}]", "a [value, value, count] triple", cell)
        for j, bug in enumerate(prop.get("known_bugs") or []):
            _fields(bug, f"{where}known_bugs[{j}].", {"count": int})
        series = prop.get("series")
        if isinstance(series, dict):
            for column, values in series.items():
                if isinstance(values, list) and not all(_is_number(v) for v in values):
                    raise _bad(f"{where}series.{column}", "a list of numbers", values)
    _all_finite(report)
    return report


def _all_finite(report: dict) -> None:
    """BadReport naming the first field that holds Infinity or NaN, anywhere in the report: Python's
    json reads them, but no number fuzzdist writes is one, and nothing can draw or sum them."""
    stack: list[tuple[object, str]] = [(report, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise _bad(where, "a finite number", node)
        if isinstance(node, dict):
            stack.extend((value, f"{where}.{key}" if where else str(key)) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((value, f"{where}[{i}]") for i, value in enumerate(node))


_NUMBER = "number"  # an int or a float, not a bool
# field -> its type; each may also be missing or null
_REPORT_FIELDS: dict[str, object] = {
    "status": str,
    "totals": dict,
    "budget": dict,
    "command": list,
    "elapsed_s": _NUMBER,
    "interrupted_by": str,
}
_TOTALS_FIELDS: dict[str, object] = {
    "examples": int,
    "distinct_failures": int,
    "failing_properties": int,
    "properties": int,
}
_BUDGET_FIELDS: dict[str, object] = {"duration_s": _NUMBER, "max_examples_per_property": int}
_PROPERTY_FIELDS: dict[str, object] = {
    "nodeid": str,
    "status": str,
    "examples": int,
    "invalid_examples": int,
    "examples_per_s": _NUMBER,
    "elapsed_s": _NUMBER,
    "rounds": int,
    "distinct_failures": int,
    "known_sightings": int,
    "failures": list,
    "events": dict,
    "event_pairs": list,
    "event_pairs_dropped": int,
    "known_bugs": list,
}
# numbers the page formats as such: present, they can't be null
_NOT_NULL = {"examples", "examples_per_s", "invalid_examples", "found_after_examples", "occurrences"}
_FAILURE_FIELDS: dict[str, object] = {
    "found_after_s": _NUMBER,
    "found_after_examples": int,
    "occurrences": int,
    "hang": dict,
    "kind": str,
}


def _fields(obj: object, where: str, fields: dict[str, object]) -> None:
    if not isinstance(obj, dict):
        raise _bad(where.rstrip("."), "an object", obj)
    for name, kind in fields.items():
        value = obj.get(name)
        if value is None and name in obj and name in _NOT_NULL:
            raise _bad(where + name, "a number", value)
        if value is None:
            continue
        ok = _is_number(value) if kind == _NUMBER else _is_int(value) if kind is int else isinstance(value, kind)  # type: ignore[arg-type]
        if not ok:
            what = {_NUMBER: "a number", int: "a whole number", str: "a string", list: "a list", dict: "an object"}[
                kind
            ]
            raise _bad(where + name, what, value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _bad(field: str, what: str, value: object) -> BadReport:
    shown = repr(value)
    return BadReport(
        f"its field {field} should be {what}, not {shown[:60] + '...' if len(shown) > 60 else shown}: "
        "the report is damaged or was edited; pass the file fuzzdist run wrote with --report"
    )


def render_page(report: dict) -> str:
    """The whole page for a JSON report (a finished or a running campaign's)."""
    props = [p for p in report.get("properties", []) if isinstance(p, dict)]
    status = str(report.get("status", "?"))
    title = f"fuzzdist campaign {status}"
    refresh = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if status in ("running", "starting") else ""
    body = [_header(report, props), _known_section(props), _timeline(report, props)]
    body.append(coverage_report.html_section(report.get("coverage")))  # --cover: code reached on the ranks
    budget = [MAX_PAGE_GRID_CELLS]  # grid cells the page may still draw
    body += [_property(i, prop, budget) for i, prop in enumerate(props)]
    # A lone surrogate (a non-UTF-8 byte in a path or an argument) can't be written as UTF-8: shown escaped.
    return encodable(
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{refresh}'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n<footer>Written by fuzzdist from the campaign's JSON report: "
        + _e(
            f"fuzzdist {report.get('fuzzdist_version', '?')}, hypothesis {report.get('hypothesis_version', '?')}"
            f", torch {report.get('torch_version', '?')}"
        )
        + "</footer>\n</body></html>\n"
    )


# -- the campaign as a whole ------------------------------------------------------------------


def _header(report: dict, props: list[dict]) -> str:
    totals = report.get("totals") or {}
    status = str(report.get("status", "?"))
    by = report.get("interrupted_by")
    budget = report.get("budget") or {}
    budget_text = (
        " or ".join(
            ([fmt_seconds(budget["duration_s"])] if budget.get("duration_s") else [])
            + (
                [f"{budget['max_examples_per_property']:,} examples per property"]
                if budget.get("max_examples_per_property")
                else []
            )
        )
        or "-"
    )
    facts = [
        ("status", status + (f" (by {by})" if by else "")),
        ("command", " ".join(str(a) for a in report.get("command", []))),
        ("started", report.get("started")),
        ("updated", report.get("updated")),
        ("finished", report.get("finished") or "-"),
        ("elapsed", fmt_seconds(report.get("elapsed_s"))),
        ("budget", budget_text),
        ("device", report.get("device") or "-"),
        ("world size", report.get("world_size") or "the markers'"),
        ("database", report.get("database")),
    ]
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    error = f'<p class="error">error: {_e(report["error"])}</p>' if report.get("error") else ""
    failing = totals.get("distinct_failures", 0)
    sightings = sum(_known_count(p) for p in props)
    headline = (
        f"{totals.get('examples', 0):,} examples, {failing} distinct failure(s) in "
        f"{totals.get('failing_properties', 0)} of {totals.get('properties', len(props))} properties"
    )
    if sightings:
        bugs = {b["id"] for p in props for b in _known_bugs(p)}
        headline += (
            f"; {sightings:,} sighting(s) of {len(bugs)} known torch bug(s) in "
            f"{sum(1 for p in props if _known_count(p))} properties (counted, not failures)"
        )
    table = [
        '<table class="props"><thead><tr><th>property</th><th>status</th><th>examples</th><th>ex/s</th>'
        "<th>failures</th><th>known</th><th>never-reached pairs</th><th>stopped because</th></tr></thead>"
        "<tbody>"
    ]
    for i, prop in enumerate(props):
        grids = _grids(prop)
        never = sum(g.never for g in grids)
        cells = sum(g.cells for g in grids)
        table.append(
            f'<tr class="status-{_e(prop.get("status", ""))}"><td><a href="#prop-{i}">{_e(prop.get("nodeid"))}</a>'
            f'</td><td>{_e(prop.get("status"))}</td><td class="n">{prop.get("examples", 0):,}</td>'
            f'<td class="n">{prop.get("examples_per_s", 0):.1f}</td>'
            f'<td class="n{" bad" if prop.get("distinct_failures") else ""}">'
            f"{_e(prop.get('distinct_failures', 0))}</td>"
            f'<td class="n{" known" if _known_count(prop) else ""}">{_known_count(prop):,}</td>'
            f'<td class="n">{f"{never} of {cells}" if cells else "-"}</td>'
            f"<td>{_e(prop.get('stop_reason') or prop.get('reason') or '')}</td></tr>"
        )
    table.append("</tbody></table>")
    cls = "bad" if failing else "known" if sightings else "good"
    return (
        f'<header id="summary"><h1>fuzzdist campaign <span class="{cls}">{_e(status)}</span></h1>'
        f'<p class="headline {cls}">{_e(headline)}</p>{error}<table class="facts">{rows}</table>'
        + "".join(table)
        + "</header>"
    )


def _known_section(props: list[dict]) -> str:
    """Each known torch bug seen in the campaign: what it is, where upstream, how often, the first example."""
    seen: dict[str, dict] = {}  # bug id -> the bug, its count, the properties and the first sighting
    for prop in props:
        for bug in _known_bugs(prop):
            entry = seen.setdefault(str(bug.get("id")), {"bug": bug, "count": 0, "properties": [], "first": prop})
            entry["count"] += int(bug.get("count") or 0)
            entry["properties"].append(str(prop.get("nodeid")))
    if not seen:
        return ""
    parts = [
        '<section id="known"><h2>Known torch bugs seen</h2><p class="note">Failures of torch\'s own that '
        "fuzzdist recognises (<code>fuzzdist.known_bugs</code>): counted, not failures, so the search went "
        "on past them. Each has a standalone reproducer.</p>"
    ]
    for bug_id, entry in seen.items():
        parts.append(
            f'<div class="known-bug" id="known-{_e(bug_id)}">'
            + _known_bug_html(entry["bug"], entry["count"], entry["properties"])
            + f"<p>first seen in <code>{_e(entry['first'].get('nodeid'))}</code> on:</p>"
            f'<pre class="example">{_e(entry["bug"].get("example"))}</pre>'
            f"<p>failure:</p><pre>{_e(entry['bug'].get('failure'))}</pre></div>"
        )
    parts.append("</section>")
    return "".join(parts)


def _known_bug_html(bug: dict, count: int, properties: list[str] | None = None) -> str:
    """A known bug's heading and facts: id, sightings, summary, upstream link, reproducer (and properties)."""
    upstream = str(bug.get("upstream") or "")
    link = (
        f'<a href="{_e(upstream)}" rel="noreferrer">{_e(upstream)}</a>'
        if re.match(r"https?://", upstream)
        else _e(upstream or "-")
    )  # only web links become links (the JSON could carry javascript:)
    reproducer = bug.get("reproducer")
    where = (
        f"<li>properties: {', '.join(f'<code>{_e(p)}</code>' for p in properties)}</li>"
        if properties is not None
        else ""
    )
    return (
        f'<h4><span class="status status-known">KNOWN</span> <code>{_e(bug.get("id"))}</code> '
        f'&times;{count:,}</h4><p>{_e(bug.get("summary"))}</p><ul class="known-facts">'
        f"<li>upstream: {link}</li>"
        + (f"<li>reproduce with torch alone: <code>python {_e(reproducer)}</code></li>" if reproducer else "")
        + where
        + "</ul>"
    )


def _timeline(report: dict, props: list[dict]) -> str:
    """Distinct failures over the campaign's time, one line per property (exact: from when each was found)."""
    end = float(report.get("elapsed_s") or 0.0)
    started = [p for p in props if p.get("status") not in ("pending", "skipped", "not run")]
    # Only the properties that failed get a line: thirty flat lines at 0 would bury them (and the legend).
    failing = [p for p in started if p.get("failures")]
    series = [(str(p.get("nodeid")), failure_steps(p.get("failures") or [], _start(p), _end(p, end))) for p in failing]
    empty = "no failure found yet" if started else "no property has run yet"
    svg = xy_chart(
        "Distinct failures over time",
        series,
        x_title="seconds into the campaign",
        y_title="distinct failures",
        height=300,
        counts=True,
        empty=empty,
    )
    quiet = len(started) - len(failing)
    note = (
        f'<p class="note">{quiet} other propert{"y" if quiet == 1 else "ies"} that ran found no failure.</p>'
        if quiet and failing
        else ""
    )
    return f'<section id="timeline"><h2>Failures over time</h2><div class="chart">{svg}</div>{note}</section>'


# -- one property -----------------------------------------------------------------------------


def _property(index: int, prop: dict, budget: list[int]) -> str:
    failures = prop.get("failures") or []
    head = (
        f'<h2>{_e(prop.get("nodeid"))} <span class="status status-{_e(prop.get("status"))}">'
        f"{_e(prop.get('status'))}</span></h2>"
    )
    known = _known_count(prop)
    numbers = (
        f'<p class="numbers">{prop.get("examples", 0):,} examples '
        f"({prop.get('invalid_examples', 0):,} invalid) in {fmt_seconds(prop.get('elapsed_s'))}, "
        f"{prop.get('examples_per_s', 0):.1f}/s, {_e(prop.get('rounds', 0))} round(s), "
        f"{len(failures)} distinct failure(s)"
        + (f", {known:,} sighting(s) of known torch bugs" if known else "")
        + f"; stopped because: {_e(prop.get('stop_reason') or prop.get('reason') or '-')}</p>"
    )
    return (
        f'<section class="property" id="prop-{index}">{head}{numbers}{_throughput(prop)}'
        f"{_failures(failures, known)}{_known_in(prop)}{_coverage(prop, budget)}</section>"
    )


def _known_in(prop: dict) -> str:
    """The known torch bugs one property ran into, each with its count and the property's first example."""
    bugs = _known_bugs(prop)
    if not bugs:
        return ""
    parts = ['<div class="known-bugs"><h3>Known torch bugs (counted, not failures)</h3>']
    for bug in bugs:
        parts.append(
            f'<div class="known-bug">{_known_bug_html(bug, int(bug.get("count") or 0))}'
            f'<p>first seen on:</p><pre class="example">{_e(bug.get("example"))}</pre>'
            f"<p>failure:</p><pre>{_e(bug.get('failure'))}</pre></div>"
        )
    parts.append("</div>")
    return "".join(parts)


def _throughput(prop: dict) -> str:
    columns = series_columns(prop.get("series"))
    if columns is None:
        return '<p class="note">No time series in this report (it was written by an older fuzzdist).</p>'
    t, examples = columns["t_s"], columns["examples"]
    svg = xy_chart(
        "Examples and examples per second",
        [("examples per second", rates(t, examples))],
        x_title="seconds into the campaign",
        y_title="examples per second",
        secondary=[("examples", list(zip(t, examples, strict=True)))],
        secondary_title="right axis",
    )
    return f'<div class="chart throughput">{svg}</div>'


def _failures(failures: list[dict], known: int = 0) -> str:
    if not failures:
        if known:
            return (
                '<div class="failures"><h3>Failures</h3><p class="known">None found apart from the known torch '
                "bugs below.</p></div>"
            )
        return '<div class="failures"><h3>Failures</h3><p class="good">None found.</p></div>'
    parts = ['<div class="failures"><h3>Failures</h3>']
    for n, failure in enumerate(failures, 1):
        replayed = " (replayed from the database: found by an earlier run)" if failure.get("from_database") else ""
        when = (
            f"found after {fmt_seconds(failure.get('found_after_s'))} and "
            f"{failure.get('found_after_examples', 0):,} examples; {failure.get('occurrences', 1):,} "
            f"failing example(s)"
        )
        if failure.get("kind") == "error":
            label = "the property itself is broken (Hypothesis could not run it)"
        elif failure.get("shrunk"):
            label = "minimal example"
        else:
            label = "smallest example so far (still shrinking; the next run goes on)"
        hang = failure.get("hang")
        hang_html = ""
        if isinstance(hang, dict):
            ranks = "".join(f"<li>rank {_e(r)}: {_e(w)}</li>" for r, w in (hang.get("ranks") or {}).items())
            hang_html = f"<p>why it hung ({_e(hang.get('kind'))}): {_e(hang.get('summary'))}</p><ul>{ranks}</ul>"
        blob = failure.get("reproduce_failure")
        parts.append(
            f'<div class="failure kind-{_e(failure.get("kind"))}">'
            f"<h4>[{n}] {_e(failure.get('summary'))}{_e(replayed)}</h4>"
            f'<p class="when">{_e(when)}; where: <code>{_e(failure.get("origin"))}</code></p>{hang_html}'
            f'<p>{_e(label)}:</p><pre class="example">{_e(failure.get("example"))}</pre>'
            f'<p>reproduce:</p><pre class="reproduce">{_e(failure.get("reproduce"))}</pre>'
            + (f'<p>or pin it with:</p><pre class="reproduce">{_e(blob)}</pre>' if blob else "")
            + (
                f"<details><summary>traceback</summary><pre>{_e(failure.get('traceback'))}</pre></details>"
                if failure.get("traceback")
                else ""
            )
            + "</div>"
        )
    parts.append("</div>")
    return "".join(parts)


def _coverage(prop: dict, budget: list[int]) -> str:
    events = prop.get("events") or {}
    if not events:
        return (
            '<div class="coverage"><h3>Coverage</h3><p class="note">No <code>event()</code> was recorded: '
            "the property passed no fuzzdist spec to <code>pool.run</code> and called no "
            "<code>event()</code> itself.</p></div>"
        )
    values, loose = event_values(events)
    parts = [
        '<div class="coverage"><h3>Coverage: the <code>event()</code> values reached</h3>'
        '<table class="events"><thead><tr><th>event</th><th>values reached (examples)</th></tr></thead><tbody>'
    ]
    for key in sorted(values):
        chips = " ".join(
            f'<span class="chip">{_e(v)} <b>{n:,}</b></span>'
            for v, n in sorted(values[key].items(), key=lambda vn: _natural(vn[0]))
        )
        parts.append(f"<tr><th>{_e(key)}</th><td>{chips}</td></tr>")
    for label, n in loose:
        parts.append(f'<tr><th>{_e(label)}</th><td><span class="chip"><b>{n:,}</b></span></td></tr>')
    parts.append("</tbody></table>")
    grids = _grids(prop)
    if grids:
        parts.append(
            '<h3>Pairs reached together</h3><p class="note">Examples that reached both values; '
            '<span class="never legend">never</span> marks a pair of values, each reached by '
            "some example, that no example reached together (some pairs can't occur by "
            "construction).</p>"
        )
        drawn, left_out = _within(grids, budget)
        for i, grid in enumerate(drawn):
            if i == OPEN_GRIDS:
                parts.append(f"<details><summary>{len(drawn) - OPEN_GRIDS} more pair(s) of events</summary>")
            parts.append(grid.html())
        if len(drawn) > OPEN_GRIDS:
            parts.append("</details>")
        if left_out:
            names = ", ".join(f"{_short(g.x)} &times; {_short(g.y)}" for g in left_out[:20])
            parts.append(
                f'<p class="note">{len(left_out):,} more pair(s) of events not drawn (a page draws at most '
                f"{MAX_GRID_CELLS:,} grid cells per property and {MAX_PAGE_GRID_CELLS:,} in all): {names}"
                f"{', ...' if len(left_out) > 20 else ''}.</p>"
            )
    if prop.get("event_pairs_dropped"):
        parts.append(
            f'<p class="note">{prop["event_pairs_dropped"]:,} pair counts were not kept: the report '
            "keeps a bounded number of pairs per property.</p>"
        )
    parts.append("</div>")
    return "".join(parts)


def _within(grids: list[_Grid], budget: list[int]) -> tuple[list[_Grid], list[_Grid]]:
    """The grids to draw, in order, while their cells fit this property's share and the page's ``budget``
    (taken from it); and those left out."""
    allowed = min(MAX_GRID_CELLS, budget[0])
    drawn, left_out = [], []
    for grid in grids:
        if grid.cells <= allowed:
            drawn.append(grid)
            allowed -= grid.cells
            budget[0] -= grid.cells
        else:
            left_out.append(grid)
    return drawn, left_out


def _short(value: object) -> str:
    """An event key or value for a grid, escaped, cut to MAX_VALUE_CHARS characters."""
    text = "" if value is None else str(value)
    return _e(text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "...")


class _Grid:
    """One pair of event keys: rows x columns of example counts."""

    def __init__(self, x: str, y: str, rows: list[str], columns: list[str], counts: dict, hidden: int) -> None:
        self.x, self.y, self.rows, self.columns, self.counts, self.hidden = x, y, rows, columns, counts, hidden
        self.cells = len(rows) * len(columns)

    @functools.cached_property
    def never(self) -> int:
        """The pairs of values no example reached together."""
        return sum(1 for r in self.rows for c in self.columns if not self.counts.get((r, c)))

    def html(self) -> str:
        top = max(self.counts.values(), default=1)
        head = "".join(f"<th>{_short(c)}</th>" for c in self.columns)
        rows = []
        for r in self.rows:
            cells = []
            for c in self.columns:
                n = self.counts.get((r, c), 0)
                if n:
                    level = math.log1p(n) / math.log1p(top)
                    ink = "#fff" if level > 0.6 else "#111"
                    cells.append(
                        f'<td class="n" style="background:rgba(31,119,180,{0.1 + 0.8 * level:.2f});'
                        f'color:{ink}">{n:,}</td>'
                    )
                else:
                    cells.append(
                        f'<td class="never" title="{_short(self.x)}={_short(r)} with '
                        f'{_short(self.y)}={_short(c)}: never reached">never</td>'
                    )
            rows.append(f"<tr><th>{_short(r)}</th>{''.join(cells)}</tr>")
        hidden = (
            f'<p class="note">{self.hidden} less reached value(s) left out of this grid.</p>' if self.hidden else ""
        )
        return (
            f'<div class="pair-grid"><h4>{_short(self.x)} &times; {_short(self.y)} '
            f"<small>({self.never} of {self.cells} pairs never reached)</small></h4>"
            f'<table class="grid"><thead><tr><th class="corner">{_short(self.x)} \\ {_short(self.y)}</th>{head}'
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>{hidden}</div>"
        )


def _grids(prop: dict) -> list[_Grid]:
    """The pair grids of a property, the pairs of PAIR_ORDER first; axes hold every value reached."""
    values, _ = event_values(prop.get("events") or {})
    pairs = [p for p in prop.get("event_pairs") or [] if isinstance(p, dict) and "x" in p and "y" in p]
    for pair in pairs:  # values only the pairs know (event("key", value) labels)
        for va, vb, _ in pair.get("cells", []):
            values.setdefault(pair["x"], {}).setdefault(va, 0)
            values.setdefault(pair["y"], {}).setdefault(vb, 0)
    grids = []
    for pair in pairs:
        x, y = pair["x"], pair["y"]
        counts = {(va, vb): n for va, vb, n in pair.get("cells", [])}
        if len(values.get(x, ())) < len(values.get(y, ())):  # more values down than across
            x, y = y, x
            counts = {(b, a): n for (a, b), n in counts.items()}
        rows, hidden_rows = _axis(values.get(x, {}))
        columns, hidden_columns = _axis(values.get(y, {}))
        grids.append(_Grid(x, y, rows, columns, counts, hidden_rows + hidden_columns))

    def rank(grid: _Grid) -> tuple:
        for i, (a, b) in enumerate(PAIR_ORDER):
            if {grid.x, grid.y} == {a, b}:
                return (0, i, "", "")
        return (1, -grid.cells, grid.x, grid.y)

    return sorted(grids, key=rank)


def _axis(counts: dict[str, int]) -> tuple[list[str], int]:
    """An axis's values in natural order, at most MAX_AXIS_VALUES (the most reached), and how many were left out."""
    kept = sorted(counts, key=lambda v: -counts[v])[:MAX_AXIS_VALUES]
    return sorted(kept, key=_natural), len(counts) - len(kept)


# -- what the page computes from the JSON (tested on their own) -------------------------------


def series_columns(series: object) -> dict[str, list[float]] | None:
    """The series' columns (``t_s``, ``examples``, ...) if the report has a usable one; None otherwise."""
    if not isinstance(series, dict):
        return None
    t, examples = series.get("t_s"), series.get("examples")
    if not isinstance(t, list) or not isinstance(examples, list) or len(t) != len(examples) or not t:
        return None
    return {k: v for k, v in series.items() if isinstance(v, list)}


def rates(t: Sequence[float], examples: Sequence[float]) -> list[tuple[float, float]]:
    """Examples per second between consecutive samples, plotted at the later one."""
    steps = zip(t, t[1:], examples, examples[1:], strict=False)  # n - 1 steps from n samples
    return [(t1, (e1 - e0) / (t1 - t0)) for t0, t1, e0, e1 in steps if t1 > t0]


def failure_steps(failures: Iterable[dict], start: float, end: float) -> list[tuple[float, float]]:
    """The count of distinct failures as a step line from ``start`` to ``end`` (campaign seconds)."""
    found = sorted(float(f.get("found_after_s") or 0.0) for f in failures)
    points = [(start, 0.0)]
    for n, at in enumerate(found, 1):
        points += [(at, float(n - 1)), (at, float(n))]
    points.append((max(end, found[-1] if found else start), float(len(found))))
    return points


def event_values(events: dict[str, int]) -> tuple[dict[str, dict[str, int]], list[tuple[str, int]]]:
    """The ``key=value`` event labels grouped by key (key -> value -> examples), and the other labels."""
    values: dict[str, dict[str, int]] = {}
    loose = []
    for label, n in events.items():
        pair = split_event(label)
        if pair is None:
            loose.append((label, n))
        else:
            values.setdefault(pair[0], {})[pair[1]] = n
    return values, loose


def _known_bugs(prop: dict) -> list[dict]:
    """The property's known-bug sightings (``known_bugs`` in the JSON; absent from older reports)."""
    return [b for b in prop.get("known_bugs") or [] if isinstance(b, dict)]


def _known_count(prop: dict) -> int:
    """The property's sightings of known torch bugs, all bugs together."""
    count = prop.get("known_sightings")
    return count if isinstance(count, int) else sum(int(b.get("count") or 0) for b in _known_bugs(prop))


def _start(prop: dict) -> float:
    columns = series_columns(prop.get("series"))
    return columns["t_s"][0] if columns else 0.0


def _end(prop: dict, campaign_end: float) -> float:
    columns = series_columns(prop.get("series"))
    return columns["t_s"][-1] if columns else campaign_end


def _natural(text: str) -> list:
    """Sort key: numbers by value (ndim=2 before ndim=10), the rest by text."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1100px;padding:1em 1.5em;
color:#111;background:#fafafa}
h1{margin:.2em 0}h2{margin-top:0;word-break:break-all}h3{margin:1em 0 .4em}h4{margin:.6em 0 .3em}
section,header{background:#fff;border:1px solid #ddd;border-radius:6px;padding:1em 1.2em;margin:1em 0}
table{border-collapse:collapse;margin:.4em 0}th,td{border:1px solid #e3e3e3;padding:.2em .5em;text-align:left;
vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
table.facts th{background:#f4f4f4;white-space:nowrap}table.facts td{word-break:break-all}
table.props{width:100%}table.props td:first-child{word-break:break-all}
.good{color:#1a7f37}.bad{color:#c62828;font-weight:bold}.error{color:#c62828}.known{color:#9a5b00;font-weight:bold}
.headline{font-size:1.15em}.note{color:#555;font-size:.92em}
.status{font-size:.7em;padding:.1em .5em;border-radius:1em;background:#eee;vertical-align:middle}
.status-failed,.status-error{background:#fde2e1;color:#a01919}.status-passed{background:#dcf5e3;color:#1a7f37}
tr.status-failed td,tr.status-error td{background:#fff6f6}
.status-known{background:#fff0c2;color:#7a4800}tr.status-known td{background:#fffbea}
.known-bug{border-left:4px solid #e0a800;padding:.2em .8em;margin:.6em 0;background:#fffdf3}
.failure{border-left:4px solid #c62828;padding:.2em .8em;margin:.6em 0;background:#fffafa}
.failure.kind-flaky{border-color:#ef6c00}.failure.kind-error{border-color:#6a1b9a}
pre{background:#f6f8fa;border:1px solid #e3e3e3;padding:.5em;overflow-x:auto;white-space:pre-wrap;
word-break:break-all;margin:.2em 0}pre.reproduce{background:#f0f4ff}
.chip{display:inline-block;border:1px solid #d0d7de;border-radius:1em;padding:0 0 0 .5em;margin:.1em;font-size:.9em}
.chip b{display:inline-block;background:#e8eef7;border-radius:1em;padding:0 .45em;margin-left:.2em;font-weight:normal}
table.grid td,table.grid th{font-size:.85em;text-align:center;min-width:3.5em}table.grid tbody th{text-align:right}
td.never,.never.legend{background:#fff3e0;color:#b35c00;font-size:.8em;font-style:italic}
.never.legend{padding:0 .4em;border:1px solid #f0c080}
.chart svg{width:100%;height:auto;max-width:860px}
footer{color:#777;font-size:.85em;margin:1em 0}
"""


class HtmlPage:
    """The campaign's HTML page, rewritten from the report's data no oftener than keeps its rendering
    under HTML_COST_SHARE of the time: it takes tens of milliseconds per property, the JSON next to
    nothing.  One campaign and the ``--jobs`` parent write theirs through it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._next = 0.0  # monotonic time of the next throttled rewrite

    def write(self, data: dict, force: bool = False) -> str | None:
        """Rewrite the page atomically if it is due (or ``force``: a property's end, the campaign's).
        None if it was written or not due; else why writing it failed (the caller says so: the
        campaign goes on, the JSON report has it all)."""
        now = time.monotonic()
        if not force and now < self._next:
            return None
        try:
            write_text_atomic(self.path, render_page(data))
        except Exception as exc:  # noqa: BLE001 - a rendering bug must not end a campaign
            return f"{type(exc).__name__}: {exc}"
        self._next = now + max(REPORT_INTERVAL_S, (time.monotonic() - now) / HTML_COST_SHARE)
        return None
