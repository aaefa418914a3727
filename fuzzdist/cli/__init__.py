"""The ``fuzzdist`` command: fuzz campaigns over the property suite, replay of what they found,
and conformance fuzzing of a ProcessGroup.

    fuzzdist run [PATH_OR_PROPERTY ...] [--duration 10m] [--max-examples N] [--device cpu|cuda]
                 [--database DIR_OR_URL] [--report FILE.json] [--junit FILE.xml] [--seed N]
                 [--world-size N] [--timeout SECONDS] [--progress auto|rich|plain|none] [--html FILE.html]
    fuzzdist replay [PATH_OR_PROPERTY ...] [--database DIR_OR_URL] [--export] [--device cpu|cuda]
    fuzzdist check-pg MODULE:CALLABLE [-w N ...] [--duration 10m] [--max-examples N] [--ops OP,...]
    fuzzdist report REPORT.json --html OUT.html

Every command (one module each: :mod:`~fuzzdist.cli.run`,
:mod:`~fuzzdist.cli.replay`, :mod:`~fuzzdist.cli.check_pg`, :mod:`~fuzzdist.cli.report`) shares one
parser, one duration syntax and these exit codes (:mod:`fuzzdist.cli._common`); ``run`` and
``replay`` share their pool and database options (:mod:`fuzzdist.cli._campaign`), and ``run
--cover`` lives in :mod:`fuzzdist.cli._cover`:

    0   nothing failed (check-pg: the group conforms)
    1   a failure was found (run, check-pg), a stored failure still fails
        (replay), or a property errored
    2   bad input: one line on stderr, ``fuzzdist CMD: error: ...``, says what to do
    3   pytest's own internal error (run, replay)
    128+N  interrupted by signal N with nothing found (run, replay)
"""

from __future__ import annotations

import argparse
import sys

from fuzzdist.cli import check_pg, replay, report, run
from fuzzdist.cli._common import EXIT_USAGE, Parser, parse_duration
from fuzzdist.errors import UsageError

__all__ = ["build_parser", "main", "parse_duration"]


def build_parser() -> argparse.ArgumentParser:
    """The ``fuzzdist`` parser, with one subcommand per module."""
    parser = Parser(prog="fuzzdist", description="Property-based fuzz campaigns for torch.distributed.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    check_pg.add_parser(sub)
    run.add_parser(sub)
    replay.add_parser(sub)
    report.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``fuzzdist ARGV`` (default: ``sys.argv[1:]``); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a one-line usage error (see Parser.error)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args.argv = argv
    try:
        return args.func(args)
    except UsageError as exc:
        from fuzzdist.campaign.database import redact
        from fuzzdist.campaign.plain_text import plain

        print(f"fuzzdist {args.command}: error: {plain(redact(str(exc)))}", file=sys.stderr)
        return EXIT_USAGE
