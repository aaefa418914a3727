"""The ``coverage`` section of a campaign's report (``fuzzdist run --cover``): build, merge, print, draw.

Pure functions on plain data, apart from reading the measured packages' source to count their
executable lines.  The section, as the JSON report holds it::

    "coverage": {
      "packages": ["torch.distributed"], "mechanism": "monitoring",
      "lines_reached": 9120, "executable_lines": 41233, "percent": 22.1,
      "files": {"torch/distributed/distributed_c10d.py": {"reached": "120-124,131", "lines": 40, "executable": 1830}},
      "never_reached": ["torch/distributed/rpc/api.py", ...],
      "properties": {"<nodeid>": {"lines_reached": 800, "files": {"<file>": "120-124,131"},
                                  "timeline": [[t_s, lines], ...]}},
      "timeline": [[t_s, lines], ...]
    }

*Executable lines* are the lines inside functions (what runs when code is called): a module's and a
class's top-level lines run once, when the ranks import the package, before any example, so they are
neither listed nor counted.  Two things the ranks run are listed but never counted (:data:`NOT_COUNTED`,
printed with the summary): functions the import itself calls (a registry filled at import time, a
decorator), since a rank imports the package when it unpickles its first example, before recording
starts; and an example whose rank hangs or dies, whose lines go with the process the pool replaces.  The
processes a property starts itself (torchrun's agents and workers, short-lived worlds) count too
(:mod:`fuzzdist.pool.process_cover`), but not one killed from outside at its deadline.  A file
whose every reached line was in such examples shows 0.  ``reached`` lists lines as ranges
(``"120-124,131"``).  Times are seconds into the campaign.
"""

from __future__ import annotations

import functools
import html
import os
from collections.abc import Iterable, Sequence
from typing import Any

CHART_PROPERTIES = 9  # the chart draws the total and the properties that reached most lines
NOT_COUNTED = (
    "not counted: functions run while a rank imports the packages, before its first example, "
    "examples that hung or killed their rank, and processes a property started that were killed "
    "from outside at their deadline"
)
"""What the summary line says the count leaves out (see the module's docstring)."""
_CO_NEWLOCALS = 0x2  # a function's code object (not a module's or a class body's)


# -- lines ----------------------------------------------------------------------------------


@functools.cache
def _executable(path: str, mtime: float) -> frozenset[int]:
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    lines: set[int] = set()
    stack = [code]
    while stack:
        co = stack.pop()
        stack.extend(c for c in co.co_consts if hasattr(c, "co_lines"))
        if not co.co_flags & _CO_NEWLOCALS:
            continue
        mine = {line for _, _, line in co.co_lines() if line is not None}
        if len(mine) > 1:  # the def (or first decorator) line holds only the frame's set-up
            mine.discard(co.co_firstlineno)
        lines |= mine
    return frozenset(lines)


def executable_lines(path: str) -> frozenset[int]:
    """The lines inside functions of the Python file ``path`` (empty if it can't be read or compiled)."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return frozenset()
    return _executable(path, mtime)


def source_files(root: str) -> list[str]:
    """The ``.py`` files under ``root`` (a directory), or ``root`` itself (a file), sorted."""
    if not os.path.isdir(root):
        return [root]
    found = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [os.path.join(directory, f) for f in files if f.endswith(".py")]
    return sorted(found)


def ranges(lines: Iterable[int]) -> str:
    """``[1, 2, 3, 7]`` as ``"1-3,7"``."""
    out: list[str] = []
    ordered = sorted(set(lines))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def parse_ranges(text: object) -> set[int]:
    """The lines in a ``"1-3,7"`` string (what doesn't parse is skipped: a report is untrusted input)."""
    lines: set[int] = set()
    if not isinstance(text, str):
        return lines
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        try:
            a, b = int(low), int(high or low)
        except ValueError:
            continue
        if 0 < a <= b and b - a < 1_000_000:
            lines.update(range(a, b + 1))
    return lines


# -- the section ------------------------------------------------------------------------------


def build_section(ledger: Any, campaign_started: float) -> dict:
    """The section for a :class:`fuzzdist.pool.line_coverage.Ledger`; times counted from ``campaign_started``
    (a ``time.monotonic()``).  Only executable lines are listed (see the module docstring)."""
    shift = ledger.started - campaign_started
    names: dict[str, str] = {}

    def display(filename: str) -> str:
        name = names.get(filename)
        if name is None:
            name = filename
            for target in ledger.targets:
                if filename == target.root or filename.startswith(os.path.join(target.root, "")):
                    name = os.path.relpath(filename, target.base).replace(os.sep, "/")
                    break
            names[filename] = name
        return name

    exec_lines: dict[str, frozenset[int]] = {}
    for target in ledger.targets:
        for path in source_files(target.root):
            exec_lines[display(path)] = executable_lines(path)

    def counted(files: dict[str, set[int]]) -> dict[str, set[int]]:
        out = {}
        for filename, lines in files.items():
            name = display(filename)
            mine = lines & exec_lines.get(name, frozenset())
            if mine:
                out[name] = mine
        return out

    properties = {}
    for scope, files in ledger.by_scope.items():
        shown = counted(files)
        if shown:
            properties[scope or "(outside a property)"] = {
                "lines_reached": sum(len(v) for v in shown.values()),
                "files": {f: ranges(lines) for f, lines in sorted(shown.items())},
                "timeline": _shift(ledger.scope_timelines.get(scope, []), shift),
            }
    return _assemble(
        [t.name for t in ledger.targets],
        ledger.mechanism,
        counted(ledger.total),
        {name: len(lines) for name, lines in exec_lines.items()},
        properties,
        _shift(ledger.timeline, shift),
    )


def _assemble(
    packages: list[str],
    mechanism: str,
    reached: dict[str, set[int]],
    executable: dict[str, int],
    properties: dict,
    timeline: list,
) -> dict:
    files: dict[str, dict[str, Any]] = {}
    for name in sorted(set(executable) | set(reached)):
        lines = reached.get(name, set())
        files[name] = {"reached": ranges(lines), "lines": len(lines), "executable": executable.get(name, 0)}
    total = sum(executable.values())
    lines_reached = sum(f["lines"] for f in files.values())
    return {
        "packages": packages,
        "mechanism": mechanism,
        "lines_reached": lines_reached,
        "executable_lines": total,
        "percent": round(100.0 * lines_reached / total, 1) if total else 0.0,
        "files": files,
        "never_reached": [name for name, f in files.items() if not f["lines"] and f["executable"]],
        "properties": properties,
        "timeline": timeline,
    }


def _shift(points: Sequence[tuple[float, int]], shift: float) -> list[list[float]]:
    return [[round(max(0.0, t + shift), 3), n] for t, n in points]


def merge_sections(sections: Sequence[dict | None]) -> dict | None:
    """Several reports' sections (``--jobs`` workers, or a fleet's machines) as one: lines united per file
    and per property.  The merged total over time is the highest of theirs at each moment (their clocks
    differ and their lines overlap: a lower bound of the union's); None if no report has a section."""
    parts = [s for s in sections if isinstance(s, dict) and isinstance(s.get("files"), dict)]
    if not parts:
        return None
    reached: dict[str, set[int]] = {}
    executable: dict[str, int] = {}
    for part in parts:
        for name, entry in part["files"].items():
            if isinstance(entry, dict):
                reached.setdefault(str(name), set()).update(parse_ranges(entry.get("reached")))
                executable[str(name)] = max(executable.get(str(name), 0), _int(entry.get("executable")))
    found: dict[str, tuple[dict[str, set[int]], list]] = {}
    for part in parts:
        for nodeid, entry in (part.get("properties") or {}).items():
            if isinstance(entry, dict):
                files, timelines = found.setdefault(str(nodeid), ({}, []))
                for name, text in (entry.get("files") or {}).items():
                    files.setdefault(str(name), set()).update(parse_ranges(text))
                timelines.append(entry.get("timeline") or [])
    properties = {
        nodeid: {
            "lines_reached": sum(len(v) for v in files.values()),
            "files": {k: ranges(v) for k, v in sorted(files.items())},
            "timeline": _max_timeline(timelines),
        }
        for nodeid, (files, timelines) in found.items()
    }
    packages = list(dict.fromkeys(str(p) for part in parts for p in part.get("packages") or []))
    mechanism = "/".join(sorted({str(part.get("mechanism")) for part in parts}))
    merged = _assemble(
        packages,
        mechanism,
        reached,
        executable,
        properties,
        _max_timeline([part.get("timeline") or [] for part in parts]),
    )
    merged["merged_from"] = len(parts)
    return merged


def _max_timeline(timelines: Sequence[Any]) -> list[list[float]]:
    points = sorted(
        (float(p[0]), i, int(p[1]))
        for i, tl in enumerate(timelines)
        if isinstance(tl, list)
        for p in tl
        if isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(v, int | float) for v in p)
    )
    best: dict[int, int] = {}
    out: list[list[float]] = []
    for t, i, n in points:
        best[i] = n
        top = max(best.values())
        if not out or top > out[-1][1]:
            out.append([t, top])
    return out


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


# -- for people -------------------------------------------------------------------------------


def summary_line(section: dict | None) -> str | None:
    """The line ``fuzzdist run`` prints at the end; None without a section."""
    if not isinstance(section, dict):
        return None
    files = [f for f in (section.get("files") or {}).values() if isinstance(f, dict) and f.get("executable")]
    touched = sum(1 for f in files if f.get("lines"))
    packages = ", ".join(str(p) for p in section.get("packages", []))
    return (
        f"code reached on the ranks ({packages}): {_int(section.get('lines_reached')):,} of "
        f"{_int(section.get('executable_lines')):,} executable lines ({section.get('percent', 0)}%), "
        f"in {touched} of {len(files)} files; {len(section.get('never_reached') or [])} files never reached "
        f"(measured with {section.get('mechanism')}; {NOT_COUNTED})"
    )


def html_section(section: dict | None) -> str:
    """The page's section: totals, lines over time, per property, per file, the files never reached."""
    if not isinstance(section, dict):
        return ""
    from fuzzdist.campaign.charts import xy_chart

    e = _escape
    parts = [
        '<section id="code-coverage"><h2>Code reached on the ranks</h2>',
        f"<p>{e(summary_line(section))}. Executable lines are those inside functions: module and class "
        "top-level lines run at import, before any example, and are not counted.</p>",
    ]
    series = [("all properties", section.get("timeline") or [])]
    entries = [(str(n), e) for n, e in (section.get("properties") or {}).items() if isinstance(e, dict)]
    top = sorted(entries, key=lambda ne: -_int(ne[1].get("lines_reached")))[:CHART_PROPERTIES]
    series += [(nodeid, entry.get("timeline") or []) for nodeid, entry in top]
    points = [
        (name, [(p[0], p[1]) for p in pts if isinstance(p, list | tuple) and len(p) == 2]) for name, pts in series
    ]
    title = "Lines reached over time" + (
        f" (the {len(top)} properties that reached most)" if len(entries) > len(top) else ""
    )
    svg = xy_chart(title, points, x_title="seconds into the campaign", y_title="lines reached", height=320, counts=True)
    parts.append(f'<div class="chart">{svg}</div>')
    total = _int(section.get("executable_lines")) or 1
    parts.append(
        "<h3>Per property</h3><table><tr><th>property</th><th>lines reached</th><th>% of executable</th>"
        "<th>files</th></tr>"
    )
    for nodeid, entry in sorted(
        (section.get("properties") or {}).items(), key=lambda kv: -_int((kv[1] or {}).get("lines_reached"))
    ):
        if not isinstance(entry, dict):
            continue
        n = _int(entry.get("lines_reached"))
        parts.append(
            f"<tr><td>{e(nodeid)}</td><td>{n:,}</td><td>{100.0 * n / total:.1f}</td>"
            f"<td>{len(entry.get('files') or {})}</td></tr>"
        )
    parts.append(
        "</table><h3>Per file</h3><table><tr><th>file</th><th>lines reached</th><th>executable</th><th>%</th></tr>"
    )
    files = section.get("files") or {}
    for name, entry in sorted(files.items(), key=lambda kv: (-_int((kv[1] or {}).get("lines")), kv[0])):
        if not isinstance(entry, dict) or not entry.get("lines"):
            continue
        n, m = _int(entry.get("lines")), _int(entry.get("executable"))
        parts.append(
            f'<tr><td title="{e(entry.get("reached"))}">{e(name)}</td><td>{n:,}</td><td>{m:,}</td>'
            f"<td>{100.0 * n / m if m else 0:.1f}</td></tr>"
        )
    never = section.get("never_reached") or []
    parts.append(f"</table><h3>Files never reached ({len(never)})</h3>")
    if never:
        parts.append(
            "<details><summary>show them</summary><ul>" + "".join(f"<li>{e(n)}</li>" for n in never) + "</ul></details>"
        )
    parts.append("</section>")
    return "".join(parts)


def _escape(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)
