"""``fuzzdist report``: the HTML page of a campaign's JSON report, finished or still running."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from fuzzdist.campaign.plain_text import plain
from fuzzdist.cli._common import EXIT_OK
from fuzzdist.errors import UsageError


def add_parser(sub: Any) -> None:
    """Register ``report`` on the top parser's subcommands."""
    report = sub.add_parser(
        "report",
        help="write the HTML page of a campaign's JSON report",
        description="Write one self-contained HTML page (throughput, failures with their "
        "minimal examples and reproducing commands, coverage of the drawn inputs) "
        "from the JSON report of `fuzzdist run`, finished or still running.",
    )
    report.add_argument(
        "report",
        metavar="REPORT.json",
        nargs="+",
        help="the JSON report fuzzdist run wrote (--report); several (a fleet's machines sharing "
        "a database) are merged into one: properties, failures and code coverage",
    )
    report.add_argument("--html", metavar="OUT.html", help="the page to write")
    report.add_argument("--json", metavar="OUT.json", help="also write the merged JSON report (several reports)")
    report.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """``fuzzdist report``; returns the exit code (bad input raises UsageError)."""
    from fuzzdist.campaign.charts import missing_plotting
    from fuzzdist.campaign.html_report import check_report, render_page
    from fuzzdist.campaign.report import write_text_atomic
    from fuzzdist.errors import BadReport

    if not args.html and not args.json:
        raise UsageError(
            "the following arguments are required: --html (with several reports, --json OUT.json will do instead)"
        )
    if args.json and len(args.report) < 2:
        raise UsageError("--json writes the merge of several reports: pass two or more REPORT.json")
    reason = missing_plotting() if args.html else None
    if reason:
        raise UsageError(reason)
    _check_outputs(args)
    reports = [_read(path, check_report, BadReport) for path in args.report]
    if len(reports) == 1:
        data = reports[0]
    else:
        from fuzzdist.campaign.merge import merge_reports

        base = {k: v for k, v in reports[0].items() if k not in ("properties", "totals", "coverage", "workers")}
        data = merge_reports(base, reports, [{"index": i, "report": path} for i, path in enumerate(args.report)])
    if args.json:
        try:
            write_text_atomic(args.json, json.dumps(data, indent=2, default=str) + "\n")
        except OSError as exc:
            raise UsageError(
                f"can't write {args.json} ({exc.strerror or exc}): pass --json with a path in a writable directory"
            ) from None
        print(f"JSON report: {plain(os.path.abspath(args.json))}")
    if not args.html:
        return EXIT_OK
    try:
        page = render_page(data)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:  # what check_report missed
        raise UsageError(
            f"can't make a page of {', '.join(args.report)} ({type(exc).__name__}: {exc}): the report "
            "is damaged or was edited; pass the file fuzzdist run wrote with --report"
        ) from None
    try:
        write_text_atomic(args.html, page)
    except OSError as exc:
        raise UsageError(
            f"can't write {args.html} ({exc.strerror or exc}): pass --html with a path in a writable directory"
        ) from None
    print(f"HTML report: {plain(os.path.abspath(args.html))}")
    return EXIT_OK


def _read(path: str, check_report: Any, bad_report: type[Exception]) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return check_report(json.load(f))
    except OSError as exc:
        raise UsageError(
            f"can't read {path} ({exc.strerror or exc}): pass the JSON report "
            "fuzzdist run wrote (its --report, default fuzzdist-report.json)"
        ) from None
    except bad_report as exc:
        raise UsageError(f"{path}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, a 5000-digit number
        raise UsageError(f"{path} is not JSON ({str(exc)[:200]}): pass the JSON report fuzzdist run wrote") from None


def _check_outputs(args: argparse.Namespace) -> None:
    """The outputs' paths, before anything is read: writable, and none of them one of the reports read."""
    from fuzzdist.campaign.output import same_output
    from fuzzdist.cli._common import check_outputs

    check_outputs(("--html", args.html), ("--json", args.json))
    for flag, out in (("--html", args.html), ("--json", args.json)):
        for path in args.report if out else ():
            if same_output(path, out):
                raise UsageError(
                    f"{flag} {out} is the report read: writing it would overwrite the report; name another file"
                )
