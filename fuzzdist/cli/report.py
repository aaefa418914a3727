"""``fuzzdist report``: the HTML page of a campaign's JSON report, finished or still running."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from fuzzdist.cli._common import EXIT_OK
from fuzzdist.errors import UsageError


def add_parser(sub: Any) -> None:
    """Register ``report`` on the top parser's subcommands."""
    report = sub.add_parser("report", help="write the HTML page of a campaign's JSON report",
                            description="Write one self-contained HTML page (throughput, failures with their "
                                        "minimal examples and reproducing commands, coverage of the drawn inputs) "
                                        "from the JSON report of `fuzzdist run`, finished or still running.")
    report.add_argument("report", metavar="REPORT.json", help="the JSON report fuzzdist run wrote (--report)")
    report.add_argument("--html", required=True, metavar="OUT.html", help="the page to write")
    report.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """``fuzzdist report``; returns the exit code (bad input raises UsageError)."""
    from fuzzdist.campaign.charts import missing_plotting
    from fuzzdist.campaign.html_report import check_report, render_page
    from fuzzdist.campaign.report import write_text_atomic
    from fuzzdist.errors import BadReport

    reason = missing_plotting()
    if reason:
        raise UsageError(reason)
    try:
        with open(args.report, encoding="utf-8") as f:
            data = check_report(json.load(f))
    except OSError as exc:
        raise UsageError(f"can't read {args.report} ({exc.strerror or exc}): pass the JSON report "
                         "fuzzdist run wrote (its --report, default fuzzdist-report.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{args.report} is not JSON ({exc}): pass the JSON report fuzzdist run wrote") from None
    except BadReport as exc:
        raise UsageError(f"{args.report}: {exc}") from None
    try:
        write_text_atomic(args.html, render_page(data))
    except OSError as exc:
        raise UsageError(f"can't write {args.html} ({exc.strerror or exc}): pass --html with a path in a "
                         "writable directory") from None
    print(f"HTML report: {os.path.abspath(args.html)}")
    return EXIT_OK
