"""The driver's side of ``--cover``: which packages to measure, and the lines the ranks reached, merged.

:func:`enable` resolves the package names to their source directories (refusing, with what to do,
a name that doesn't import or has no Python source); every run message then asks the ranks to
measure them (:func:`scope_field`, read by :mod:`fuzzdist.pool.rank.line_cover`).  Each rank's reply then
carries the lines it reached for the first time in the current scope; :func:`absorb` takes them off
the reply, before the pool files it, into the one :class:`Ledger` of this process: per scope (the
campaign names the property it runs, :func:`set_scope`), per file, and in total, with the total over
time.  The ranks and examples merge here; workers' and fleets' reports merge in
:mod:`fuzzdist.campaign.coverage_report`.

Lines only travel with a reply, so two kinds are never counted: what a rank runs while it unpickles an
example (its first one imports the packages, and any function the import calls: DTensor fills its
sharding-rule registry so), and everything an example ran on a rank that hung or died (the pool replaces
the process, its unsent lines with it).  The report says so (``coverage_report.NOT_COUNTED``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fuzzdist.errors import InvalidArgument
from fuzzdist.pool.rank import line_cover

DEFAULT_PACKAGES = ("torch.distributed",)
MECHANISM_VARIABLE = "FUZZDIST_COVER_MECHANISM"  # chooses the mechanism (benchmarks compare them)
MAX_TIMELINE = 400  # points kept of the total over time (thinned by half when full)


@dataclass
class Target:
    """A package to measure: its name, the directory (or single file) of its source, and what its files
    are called in a report (relative to the directory above the package: ``torch/distributed/...``)."""

    name: str
    root: str
    base: str


def resolve(names: Iterable[str]) -> list[Target]:
    """The source of each named package or module, or a :class:`~fuzzdist.errors.InvalidArgument` saying why not.

    The names are imported (a package's ``__init__`` runs, as it will on the ranks).
    """
    targets: list[Target] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's to fix
            raise InvalidArgument(
                f"--cover {name}: it doesn't import here ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); name an importable package "
                "or module, e.g. --cover torch.distributed"
            ) from None
        paths = list(getattr(module, "__path__", None) or [])
        origin = getattr(module, "__file__", None)
        if paths:
            root = os.path.realpath(paths[0])
            has_source = any(f.endswith(".py") for _, _, files in os.walk(root) for f in files)
        elif origin:
            root = os.path.realpath(origin)
            has_source = root.endswith(".py")
        else:
            root, has_source = "", False
        if not has_source:
            where = f" ({origin})" if origin else ""
            raise InvalidArgument(
                f"--cover {name}: it has no Python source to measure{where}: a C extension "
                "(or a built-in module) runs no Python lines; name a package with .py files"
            )
        targets.append(Target(name, root, os.path.dirname(root)))
    if not targets:
        raise InvalidArgument(
            "--cover names no package; give one or more, comma-separated: --cover torch.distributed,mypkg"
        )
    return targets


@dataclass
class Ledger:
    """The lines the ranks reached, merged over ranks and examples: per scope and per file, and in total."""

    targets: list[Target]
    mechanism: str
    started: float = field(default_factory=time.monotonic)
    scope: str | None = None
    total: dict[str, set[int]] = field(default_factory=dict)  # filename -> lines
    by_scope: dict[str, dict[str, set[int]]] = field(default_factory=dict)
    count: int = 0  # lines in `total`
    scope_counts: dict[str, int] = field(default_factory=dict)
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (seconds since `started`, count)
    scope_timelines: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    roots: tuple[str, ...] = ()  # the targets' roots, as the ranks are asked to measure them

    def __post_init__(self) -> None:
        self.roots = tuple(t.root for t in self.targets)

    def add(self, lines: dict[str, list[int]], scope: str | None = None) -> int:
        """Merge one rank's new lines; return how many are new to the total."""
        scope = self.scope if scope is None else scope
        now = round(time.monotonic() - self.started, 3)
        before = self.count
        mine = self.by_scope.setdefault(scope or "", {})
        scope_before = self.scope_counts.get(scope or "", 0)
        scope_count = scope_before
        for filename, numbers in lines.items():
            if not isinstance(filename, str):
                continue
            have = self.total.setdefault(filename, set())
            had = len(have)
            have.update(n for n in numbers if isinstance(n, int))
            self.count += len(have) - had
            have_scope = mine.setdefault(filename, set())
            had = len(have_scope)
            have_scope.update(n for n in numbers if isinstance(n, int))
            scope_count += len(have_scope) - had
        self.scope_counts[scope or ""] = scope_count
        if self.count != before:
            _append(self.timeline, (now, self.count))
        if scope_count != scope_before:
            _append(self.scope_timelines.setdefault(scope or "", []), (now, scope_count))
        return self.count - before


def _append(series: list[tuple[float, int]], point: tuple[float, int]) -> None:
    series.append(point)
    if len(series) > MAX_TIMELINE:  # keep the first, the last and every other one between
        series[:] = series[:-1:2] + series[-1:]


_ledger: Ledger | None = None


def enable(names: Iterable[str], mechanism: str | None = None) -> Ledger:
    """Measure ``names`` on the ranks of every pool from the next example on; return the ledger.

    ``mechanism``: "monitoring", "ctracer" or "settrace" (default: ``$FUZZDIST_COVER_MECHANISM``, else
    the fastest this Python has).
    """
    global _ledger
    targets = resolve(names)
    mechanism = mechanism or os.environ.get(MECHANISM_VARIABLE) or line_cover.best_mechanism()
    if mechanism not in line_cover.MECHANISMS:
        raise InvalidArgument(f"coverage mechanism {mechanism!r}: use one of {', '.join(line_cover.MECHANISMS)}")
    if mechanism == "monitoring" and not hasattr(sys, "monitoring"):
        raise InvalidArgument("coverage with sys.monitoring needs Python 3.12 or later; use settrace here")
    if mechanism == "ctracer" and not line_cover.has_c_tracer():
        raise InvalidArgument("coverage with coverage.py's C tracer needs coverage installed: pip install coverage")
    _ledger = Ledger(targets, mechanism)
    return _ledger


def disable() -> None:
    """Stop asking the ranks for coverage, and drop the ledger."""
    global _ledger
    _ledger = None


def ledger() -> Ledger | None:
    """This process's ledger; None when coverage is off."""
    return _ledger


def set_scope(scope: str | None) -> None:
    """Attribute the lines reached from now on to ``scope`` (the campaign: the property it runs)."""
    if _ledger is not None:
        _ledger.scope = scope


def scope_field() -> tuple[tuple[str, ...], str, str] | None:
    """What a run message asks of the ranks: ``(roots, mechanism, scope)``; None when coverage is off
    (no field at all).  Sent with every example, so any pool, whenever started, measures the same."""
    if _ledger is None:
        return None
    return _ledger.roots, _ledger.mechanism, _ledger.scope or ""


def absorb(message: Any) -> Any:
    """Take a rank's reached lines off its reply ``message`` into the ledger; return the reply without them."""
    name, fields = message
    if "cover" not in fields:
        return message
    fields = dict(fields)
    lines = fields.pop("cover")
    if _ledger is not None and isinstance(lines, dict):
        _ledger.add(lines)
    return name, fields


def lines_reached(scope: str | None = None) -> int:
    """Lines reached so far, in ``scope`` (None: in total); 0 when coverage is off."""
    if _ledger is None:
        return 0
    return _ledger.count if scope is None else _ledger.scope_counts.get(scope, 0)
