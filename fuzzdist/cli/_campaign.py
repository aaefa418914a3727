"""What ``fuzzdist run`` and ``fuzzdist replay`` share: their pool and database options, the
targets and database they open, and the pytest command line they run in process."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

from fuzzdist.cli._common import timeout_seconds, world_size
from fuzzdist.errors import UsageError


def add_target_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "targets",
        nargs="*",
        metavar="PATH_OR_PROPERTY",
        help="files, directories, file::test ids or bare property names (default: properties/)",
    )


def add_pool_arguments(parser: argparse.ArgumentParser, device_default: str | None = "cpu") -> None:
    """``--device``, ``--database``, ``--world-size`` and ``--timeout``."""
    what = "(default cpu)" if device_default else "(default: every device the properties run on)"
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default=device_default,
        help=f"run the properties' CPU-rank or GPU-rank variants {what}",
    )
    parser.add_argument(
        "--database",
        metavar="DIR_OR_URL",
        default=None,
        help="example database: a directory or a redis://HOST:PORT/DB URL "
        "(default: Hypothesis's .hypothesis/examples, which plain pytest uses)",
    )
    parser.add_argument(
        "--database-password-file",
        metavar="FILE",
        default=None,
        help="the Redis database's password, on the first line of a file only you can read "
        "(chmod 600), so that it is not on the command line (or set FUZZDIST_REDIS_PASSWORD)",
    )
    parser.add_argument(
        "--world-size",
        type=world_size,
        metavar="N",
        help="ranks for every property, in place of the world sizes its marker pins (default: the marker's, else 2)",
    )
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        metavar="SECONDS",
        help="per-example timeout on the ranks, 1 second to a week (default 30)",
    )


def check_device(device: str | None) -> None:
    """``--device`` usable here, and the variables that say how pools start (FUZZDIST_START_METHOD,
    FUZZDIST_SPARES) valid: a UsageError before anything runs."""
    from fuzzdist.errors import InvalidArgument
    from fuzzdist.pool import starting

    try:
        starting.resolve_start_method("auto", device or "cpu")
        starting.validate_spares("auto")
    except InvalidArgument as exc:
        raise UsageError(str(exc)) from None
    if device == "cuda":
        from fuzzdist.pool.capabilities.gpu import missing_gpus

        reason = missing_gpus(1)
        if reason:
            raise UsageError(f"--device cuda {reason}; run on a GPU node or use --device cpu")


def open_targets(args: argparse.Namespace, *, write: bool) -> tuple[Any, Any]:
    """The selected targets and the example database, or a UsageError saying what is wrong."""
    from fuzzdist.campaign.database import open_database, read_password_file
    from fuzzdist.campaign.selection import resolve_targets
    from fuzzdist.errors import DatabaseError, TargetError

    try:
        targets = resolve_targets(args.targets)
    except TargetError as exc:
        raise UsageError(str(exc)) from None
    try:
        password = read_password_file(args.database_password_file) if args.database_password_file else None
        database = open_database(args.database, write=write, must_exist=not write, password=password)
    except DatabaseError as exc:
        raise UsageError(str(exc)) from None
    return targets, database


def pool_options(args: argparse.Namespace) -> list[str]:
    """The fuzzdist plugin options given; node ids (cpu-w1) and a reproducing command depend on them."""
    options = []
    if args.world_size is not None:
        options.append(f"--fuzzdist-world-size={args.world_size}")
    if args.timeout is not None:
        options.append(f"--fuzzdist-timeout={args.timeout:g}")
    return options


def pytest_args(args: argparse.Namespace, targets: Any, profile: str) -> list[str]:
    import importlib.util

    argv = [
        *targets.collect_args(),
        "-p",
        "no:terminal",
        "-p",
        "no:cacheprovider",
        f"--hypothesis-profile={profile}",
        *pool_options(args),
    ]
    if importlib.util.find_spec("pytest_timeout") is not None:
        argv += ["-o", "timeout=0"]  # a campaign runs far longer than any per-test timeout
    return argv


def terminal_stream() -> TextIO:
    """A stream on the real stdout that pytest's output capturing does not redirect."""
    try:
        return os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
    except (AttributeError, OSError, ValueError):
        return sys.stdout


def collect_error(plugin: Any) -> str | None:
    """Why the selection could not be collected, on one line; None if it could."""
    if plugin.error:
        return plugin.error
    if plugin.collect_errors:
        where, text = plugin.collect_errors[0]
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if line.startswith("E ")), lines[-1] if lines else "")
        return (
            f"can't collect {where}: {last.removeprefix('E').strip()}; "
            f"run `pytest --collect-only {where}` to see the whole error"
        )
    return None
