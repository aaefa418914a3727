"""The catalogue of torch findings: the one place each finding's metadata is written.

``catalogue.toml`` (next to this module, shipped as package data) holds, per finding id, its class
(``kind``), a one-line ``title`` for the table, the ``summary`` a known-bug report shows, the
documentation it contradicts, its closest upstream thread and the relation to it, and what its
reproducer printed on each torch release of the version matrix.  The registry
(:func:`fuzzdist.known_bugs.registry.register`) fills a ``KnownBug`` from it, and the docs' tables are
generated from it (:mod:`fuzzdist.known_bugs.catalogue_pages`).  Each finding's write-up and
reproducer live in ``docs/findings/<id>/``.

This module imports the standard library only, so that the scripts in ``docs/findings/`` can load
it by path without importing torch.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PATH = Path(__file__).with_name("catalogue.toml")

KINDS = ("wrong result", "crash", "hang", "unclear error", "missing feature", "missing validation")
"""The kinds of known bug: torch computed a wrong value; raised or died where it documents a result; blocked
without end (or until a timeout) where it documents a result; refused a documented input with an error that
doesn't say what is wrong; lacks what its documentation offers; accepted, without a clear error, an input
its documentation forbids (a misuse, not a broken promise)."""

MISUSE = "missing validation"
"""The kind of a finding that is the user's misuse, listed apart and not counted as a bug."""

VERDICTS = ("BUG", "FIXED")
"""The matrix cells that are verdicts; any other cell ("no verdict", "error (...)") says the run told nothing."""

_FIELDS = ("kind", "title", "summary", "documentation", "upstream", "relation", "known_bug", "unregistered", "matrix")
_REQUIRED = ("kind", "title", "documentation", "relation", "matrix")


class CatalogueError(ValueError):
    """The catalogue file is malformed: the message names the finding and the field to fix."""


@dataclass(frozen=True)
class Finding:
    """One torch finding, as the catalogue writes it.

    ``known_bug`` is the id its ``KnownBug`` is registered under (the finding's own id unless the file
    says otherwise); ``unregistered`` says why no ``KnownBug`` recognises it (empty: one does), and then
    ``summary`` may be empty.  ``matrix`` maps each torch version of the catalogue's matrix to what the
    reproducer printed there.
    """

    id: str
    kind: str
    title: str
    summary: str
    documentation: str
    upstream: str | None
    relation: str
    known_bug: str
    unregistered: str
    matrix: Mapping[str, str] = field(repr=False)

    @property
    def reproducer(self) -> str:
        """The standalone reproducer, relative to the repository."""
        return f"docs/findings/{self.id}/repro.py"

    @property
    def write_up(self) -> str:
        """The finding's write-up, relative to the repository."""
        return f"docs/findings/{self.id}/README.md"

    @property
    def seen_on(self) -> tuple[str, ...]:
        """The torch releases (``"2.13"``) whose matrix cell is BUG, in the matrix's order."""
        return tuple(
            ".".join(version.split("+")[0].split(".")[:2]) for version, cell in self.matrix.items() if cell == "BUG"
        )

    @property
    def is_misuse(self) -> bool:
        """Whether the finding is a misuse torch accepts rather than a bug (listed apart)."""
        return self.kind == MISUSE


@dataclass(frozen=True)
class Catalogue:
    """Every finding, in the order the catalogue lists them, and the torch versions of its matrix."""

    versions: tuple[str, ...]
    findings: Mapping[str, Finding]

    def by_known_bug(self, bug_id: str) -> Finding | None:
        """The finding whose ``KnownBug`` is registered as ``bug_id``, or None."""
        for finding in self.findings.values():
            if finding.known_bug == bug_id and not finding.unregistered:
                return finding
        return None


def parse(text: str) -> Catalogue:
    """The catalogue written in ``text`` (the TOML format of ``catalogue.toml``), checked."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"the catalogue is not valid TOML: {exc}") from exc
    versions = data.get("versions")
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
        raise CatalogueError('the catalogue needs versions = ["<torch version>", ...], the matrix\'s columns')
    findings = {}
    for finding_id, entry in data.get("findings", {}).items():
        findings[finding_id] = _finding(finding_id, entry, tuple(versions))
    if not findings:
        raise CatalogueError("the catalogue lists no finding: add [findings.<id>] tables")
    return Catalogue(tuple(versions), findings)


def _finding(finding_id: str, entry: dict[str, Any], versions: tuple[str, ...]) -> Finding:
    unknown = set(entry) - set(_FIELDS)
    if unknown:
        raise CatalogueError(f"finding {finding_id!r} has unknown fields {sorted(unknown)}; the fields are {_FIELDS}")
    missing = [name for name in _REQUIRED if not entry.get(name)]
    if not entry.get("unregistered") and not entry.get("summary"):
        missing.append("summary")
    if missing:
        raise CatalogueError(f"finding {finding_id!r} lacks {', '.join(missing)}")
    if entry["kind"] not in KINDS:
        raise CatalogueError(f"finding {finding_id!r} has kind {entry['kind']!r}; give one of {KINDS}")
    matrix = entry["matrix"]
    if list(matrix) != list(versions):
        raise CatalogueError(
            f"finding {finding_id!r}'s matrix names {list(matrix)}; it needs one cell for each of "
            f"versions = {list(versions)}, in that order"
        )
    return Finding(
        id=finding_id,
        kind=entry["kind"],
        title=entry["title"],
        summary=entry.get("summary", ""),
        documentation=entry["documentation"],
        upstream=entry.get("upstream"),
        relation=entry["relation"],
        known_bug=entry.get("known_bug", finding_id),
        unregistered=entry.get("unregistered", ""),
        matrix=dict(matrix),
    )


_loaded: Catalogue | None = None


def load() -> Catalogue:
    """The catalogue shipped with fuzzdist (read once)."""
    global _loaded
    if _loaded is None:
        _loaded = parse(PATH.read_text(encoding="utf-8"))
    return _loaded


HEADER = """\
# The torch findings fuzzdist has made: one table per finding, the one place its metadata is written.
# The registry (fuzzdist/known_bugs/registry.py) fills each KnownBug from it; the tables in docs/ are
# generated from it (python -m fuzzdist.known_bugs.catalogue_pages --write), and
# docs/findings/run_matrix.py --update writes the matrix.  The write-up and the reproducer of a
# finding live in docs/findings/<id>/ (README.md, repro.py).
#
# kind:          one of fuzzdist.known_bugs.KINDS ("missing validation": a misuse, listed apart)
# title:         what is wrong, in one line (Markdown), for the table
# summary:       what a KNOWN line says (plain text); may be left out where unregistered is given
# documentation: the documentation line it contradicts (file and line in the installed torch)
# upstream:      the thread a KNOWN line links to (optional)
# relation:      the closest upstream threads and whether it duplicates, extends, or is new (Markdown)
# known_bug:     the id its KnownBug is registered under, where it is not the finding's
# unregistered:  why no KnownBug recognises it (then no code registers it)
# matrix:        what the reproducer printed on each of `versions` (BUG, FIXED, no verdict, error (...))
"""


def dump(catalogue: Catalogue) -> str:
    """``catalogue`` in the canonical form of ``catalogue.toml`` (what ``parse`` reads back unchanged)."""
    out = [HEADER, f"versions = [{', '.join(_string(v) for v in catalogue.versions)}]\n"]
    for finding in catalogue.findings.values():
        out.append(f"\n[findings.{finding.id}]\n")
        values: dict[str, str | None] = {
            "kind": finding.kind,
            "title": finding.title,
            "summary": finding.summary,
            "documentation": finding.documentation,
            "upstream": finding.upstream,
            "relation": finding.relation,
            "known_bug": finding.known_bug if finding.known_bug != finding.id else None,
            "unregistered": finding.unregistered,
        }
        out.extend(f"{name} = {_string(value)}\n" for name, value in values.items() if value)
        cells = ", ".join(f"{_string(version)} = {_string(cell)}" for version, cell in finding.matrix.items())
        out.append(f"matrix = {{ {cells} }}\n")
    return "".join(out)


def with_matrix(catalogue: Catalogue, results: Mapping[tuple[str, str], str]) -> Catalogue:
    """``catalogue`` with the cells of ``results`` ((finding, version) -> cell) written into its matrix; a
    version it doesn't have yet becomes a new column (a finding not run there gets "not run")."""
    versions = list(catalogue.versions)
    versions += [v for v in dict.fromkeys(version for _, version in results) if v not in versions]
    findings = {}
    for finding_id, finding in catalogue.findings.items():
        matrix = {v: results.get((finding_id, v), finding.matrix.get(v, "not run")) for v in versions}
        findings[finding_id] = dataclasses.replace(finding, matrix=matrix)
    return Catalogue(tuple(versions), findings)


def _string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)
