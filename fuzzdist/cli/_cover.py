"""``fuzzdist run --cover``: the option, turning it on before anything runs, and the line printed at the end."""

from __future__ import annotations

import argparse
from typing import Any

from fuzzdist.errors import InvalidArgument, UsageError


def add_cover_argument(parser: argparse.ArgumentParser) -> None:
    """``--cover [PKG[,PKG...]]`` (bare: torch.distributed)."""
    parser.add_argument(
        "--cover",
        nargs="?",
        const="torch.distributed",
        default=None,
        metavar="PKG[,PKG...]",
        help="record which lines of these packages' Python source the ranks run (bare: "
        "torch.distributed; your own packages too), merged over ranks and examples, in "
        "the reports and the adaptive schedule (new lines count as new behaviour); "
        "costs time per example: see the docs",
    )


def enable_cover(args: argparse.Namespace) -> None:
    """Turn coverage on for ``args.cover``, or a UsageError (exit 2) naming what can't be measured."""
    if not getattr(args, "cover", None):
        return
    from fuzzdist.pool import line_coverage

    if any(mark in args.cover for mark in ("/", ".py", "::")):  # `--cover PATH`: the bare flag took a target
        raise UsageError(
            f"--cover {args.cover}: that is a target, not a package; name the packages "
            f"(--cover torch.distributed {args.cover}) or put the targets before a bare --cover"
        )
    try:
        line_coverage.enable(args.cover.split(","))
    except InvalidArgument as exc:
        raise UsageError(str(exc)) from None


def cover_summary(started: float, merged: dict | None = None) -> str:
    """The coverage line for the end of a run (``merged``: a ``--jobs`` parent's merged report), or ""."""
    from fuzzdist.campaign import coverage_report
    from fuzzdist.pool import line_coverage

    section: Any = None
    if merged is not None:
        section = merged.get("coverage")
    else:
        ledger = line_coverage.ledger()
        if ledger is not None:
            section = coverage_report.build_section(ledger, started)
    line = coverage_report.summary_line(section)
    return f"{line}\n" if line else ""
