"""The parts of the findings pages that are generated from the catalogue, and the command that writes
or checks them.

Three kinds of page carry a generated part, between :data:`BEGIN` and :data:`END`:

* ``docs/findings.md``: the table of findings (bugs, then misuse), with each torch version's verdict;
* ``docs/findings/versions.md``: the version matrix, finding by torch version;
* ``docs/findings/<id>/README.md``: the finding's heading and metadata, above its hand-written write-up.

Everything else on those pages is written by hand.  ``python -m fuzzdist.known_bugs.catalogue_pages
--write`` rewrites the generated parts after the catalogue changed; ``--check`` exits 1 naming each page
whose generated part is stale (a test runs it).  Standard library only, like the catalogue.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from fuzzdist.known_bugs.catalogue import Catalogue, Finding, load

BEGIN = (
    "<!-- Generated from fuzzdist/known_bugs/catalogue.toml by "
    "`python -m fuzzdist.known_bugs.catalogue_pages --write`: edit the catalogue, not this part. -->"
)
END = "<!-- End of the generated part. -->"

INDEX = "findings.md"
VERSIONS = "findings/versions.md"


def findings_table(catalogue: Catalogue) -> str:
    """The table of findings for ``docs/findings.md``: the bugs, then the misuse apart."""
    bugs = [f for f in catalogue.findings.values() if not f.is_misuse]
    misuse = [f for f in catalogue.findings.values() if f.is_misuse]
    head = (
        "| id | class | what is wrong | documentation (line in the installed torch) | closest upstream: relation | "
        + " | ".join(f"torch {v}" for v in catalogue.versions)
        + " |"
    )
    rule = "|" + "---|" * (5 + len(catalogue.versions))

    def rows(findings: list[Finding]) -> list[str]:
        return [
            f"| [`{f.id}`](findings/{f.id}/README.md) | {f.kind} | {f.title} | {f.documentation} | "
            f"{f.relation} | " + " | ".join(f.matrix.values()) + " |"
            for f in findings
        ]

    registered = sum(1 for f in bugs if not f.unregistered)
    return "\n".join(
        [
            f"### Bugs ({len(bugs)}, {registered} with a known-bug entry)",
            "",
            head,
            rule,
            *rows(bugs),
            "",
            f"### Missing validation ({len(misuse)}, not counted as bugs)",
            "",
            head,
            rule,
            *rows(misuse),
        ]
    )


def version_matrix(catalogue: Catalogue) -> str:
    """The finding x torch-version matrix for ``docs/findings/versions.md``, as ``run_matrix.py`` prints it
    (findings sorted by id), each id linked to its write-up."""
    lines = [
        "| finding | " + " | ".join(f"torch {v}" for v in catalogue.versions) + " |",
        "|---|" + "---|" * len(catalogue.versions),
    ]
    for finding_id in sorted(catalogue.findings):
        cells = catalogue.findings[finding_id].matrix.values()
        lines.append(f"| [`{finding_id}`]({finding_id}/README.md) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def finding_header(catalogue: Catalogue, finding: Finding) -> str:
    """The heading and metadata of ``finding``'s ``README.md``."""
    runs = "; ".join(f"torch {v}: {cell}" for v, cell in finding.matrix.items())
    entry = (
        f"none: {finding.unregistered}"
        if finding.unregistered
        else f"`{finding.known_bug}` (`fuzzdist.known_bugs.registry()`)"
    )
    return "\n".join(
        [
            f"# {finding.id}",
            "",
            f"{finding.title[:1].upper()}{finding.title[1:]}.",
            "",
            f"- **Class:** {finding.kind}"
            + (" (a misuse torch accepts; not counted as a bug)" if finding.is_misuse else ""),
            f"- **Documentation it contradicts:** {finding.documentation}",
            f"- **Closest upstream, and the relation:** {finding.relation}",
            f"- **Reproduces on:** {runs} ([the version matrix](../versions.md))",
            f"- **Reproducer:** [`repro.py`](repro.py), `python {finding.reproducer}`",
            f"- **Known-bug entry:** {entry}",
        ]
    )


def generated_parts(catalogue: Catalogue) -> Iterator[tuple[str, Callable[[], str]]]:
    """Each page with a generated part (relative to ``docs/``) and what that part is."""
    yield INDEX, functools.partial(findings_table, catalogue)
    yield VERSIONS, functools.partial(version_matrix, catalogue)
    for finding in catalogue.findings.values():
        yield f"findings/{finding.id}/README.md", functools.partial(finding_header, catalogue, finding)


class PageError(ValueError):
    """A page lacks its generated part's markers: the message names the page."""


def replaced(text: str, part: str, page: str) -> str:
    """``text`` with its generated part (between :data:`BEGIN` and :data:`END`) replaced by ``part``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise PageError(f"{page} needs one generated part: a line {BEGIN} and, below it, a line {END}")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{part}\n{END}{tail}"


def stale_pages(docs: Path, catalogue: Catalogue, write: bool = False) -> list[str]:
    """The pages under ``docs`` whose generated part is not what the catalogue gives (rewritten if ``write``)."""
    stale = []
    for page, part in generated_parts(catalogue):
        path = docs / page
        if not path.is_file():
            raise PageError(
                f"{path} doesn't exist: every finding in the catalogue needs docs/findings/<id>/README.md "
                f"with a generated part ({BEGIN} ... {END}) above its write-up"
            )
        text = path.read_text(encoding="utf-8")
        new = replaced(text, part(), str(path))
        if new != text:
            stale.append(str(path))
            if write:
                path.write_text(new, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    """``--write``: rewrite the generated parts; ``--check``: exit 1 naming each stale page."""
    parser = argparse.ArgumentParser(
        prog="python -m fuzzdist.known_bugs.catalogue_pages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the generated parts from the catalogue")
    action.add_argument(
        "--check", action="store_true", help="exit 1 if a generated part is not what the catalogue gives"
    )
    parser.add_argument(
        "--docs",
        type=Path,
        default=Path("docs"),
        help="the documentation folder (default: docs, from the repository root)",
    )
    args = parser.parse_args(argv)
    if not (args.docs / INDEX).is_file():
        parser.error(f"{args.docs / INDEX} doesn't exist: run this from the repository root, or give --docs")
    try:
        stale = stale_pages(args.docs, load(), write=args.write)
    except PageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.write:
        print(f"rewrote {len(stale)} page(s)" + "".join(f"\n  {page}" for page in stale))
        return 0
    if stale:
        print(
            "stale generated part in:"
            + "".join(f"\n  {page}" for page in stale)
            + "\nrun `python -m fuzzdist.known_bugs.catalogue_pages --write`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
