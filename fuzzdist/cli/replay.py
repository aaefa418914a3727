"""``fuzzdist replay``: re-execute the failing examples stored in the example database."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from fuzzdist.cli._campaign import (
    add_pool_arguments,
    add_target_argument,
    check_device,
    collect_error,
    open_targets,
    pool_options,
    pytest_args,
    terminal_stream,
)
from fuzzdist.cli._common import EXIT_FOUND, EXIT_INTERNAL, EXIT_OK
from fuzzdist.errors import UsageError


def add_parser(sub: Any) -> None:
    """Register ``replay`` on the top parser's subcommands."""
    replay = sub.add_parser(
        "replay",
        help="re-execute the failing examples stored in the database",
        description="Re-execute the shrunk failing examples stored in the example database "
        "and print, for each, the minimal example, each failing rank's "
        "traceback and a pytest command that reproduces it.",
    )
    add_target_argument(replay)
    replay.add_argument(
        "--export",
        action="store_true",
        help="also print @example(...) lines that pin each failure as a regression test",
    )
    replay.add_argument(
        "--export-script",
        metavar="DIR",
        help="also write each failure that still fails as a standalone Python script in DIR "
        "(created if missing): it re-runs the example on fresh ranks without pytest or "
        "Hypothesis, prints one line and exits 1 while it fails, 0 once fixed "
        "(125: no verdict), for git bisect run",
    )
    replay.add_argument(
        "--blob",
        type=blob_argument,
        metavar="BLOB",
        help="replay this one example of the one property named (the blob of Hypothesis's "
        "@reproduce_failure, as a campaign's report gives it for each failure) instead of "
        "the database's; no database is read",
    )
    add_pool_arguments(replay, device_default=None)
    replay.set_defaults(func=cmd_replay)


def blob_argument(text: str) -> str:
    """An argparse type for ``--blob``: the base64 blob of a ``@reproduce_failure`` decorator."""
    from fuzzdist.compat.hypothesis_internals import entry_from_blob

    if entry_from_blob(text.strip()) is None:
        raise argparse.ArgumentTypeError(
            f"--blob {text[:60]!r} is not a Hypothesis @reproduce_failure blob: copy "
            "the whole command from the report's `replay` field"
        )
    return text.strip()


def cmd_replay(args: argparse.Namespace) -> int:
    """``fuzzdist replay``; returns the exit code."""
    import pytest

    from fuzzdist.campaign.export_script import ExportDir
    from fuzzdist.campaign.replay import ReplayPlugin

    check_device(args.device)
    if args.blob is not None:  # one example given on the command line: no database to read
        from hypothesis.database import InMemoryExampleDatabase

        from fuzzdist.campaign.database import Database
        from fuzzdist.campaign.selection import resolve_targets
        from fuzzdist.errors import TargetError

        try:
            targets = resolve_targets(args.targets)
        except TargetError as exc:
            raise UsageError(str(exc)) from None
        database = Database(InMemoryExampleDatabase(), "(none: the example given with --blob)", False)
    else:
        targets, database = open_targets(args, write=False)
    export_dir = ExportDir(args.export_script) if args.export_script is not None else None
    try:
        stream = terminal_stream()
        plugin = ReplayPlugin(
            targets,
            database=database,
            stream=stream,
            export=args.export,
            device=args.device,
            pytest_options=pool_options(args),
            export_dir=export_dir,
            blob=args.blob,
        )
        code = pytest.main(pytest_args(args, targets, "replay"), plugins=[plugin])
    finally:
        if export_dir is not None:
            export_dir.close()
    error = collect_error(plugin)
    if error is not None:
        raise UsageError(error)
    if code == pytest.ExitCode.INTERRUPTED:
        return 128 + signal.SIGINT.value
    plugin.print_summary()
    stream.flush()
    if code == pytest.ExitCode.INTERNAL_ERROR:
        return EXIT_INTERNAL
    return EXIT_FOUND if plugin.failing_again else EXIT_OK
