"""``fuzzdist check-pg``: fuzz a ProcessGroup against the c10d contract (:mod:`fuzzdist.conformance`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

from fuzzdist.cli._common import (
    EXIT_FOUND,
    EXIT_OK,
    check_outputs,
    parse_duration,
    positive_int,
    timeout_seconds,
    world_size,
)
from fuzzdist.errors import UsageError


def add_parser(sub: Any) -> None:
    """Register ``check-pg`` on the top parser's subcommands."""
    from fuzzdist.conformance import DEFAULT_MAX_BYTES, DEFAULT_WORLD_SIZES, all_checks
    from fuzzdist.pool import DEFAULT_TIMEOUT

    parser = sub.add_parser(
        "check-pg",
        help="fuzz a ProcessGroup against the c10d contract (docs/backend-authors.md)",
        description="Fuzz a torch.distributed ProcessGroup against the c10d contract. FACTORY is "
        "'module:callable', called on every rank as factory(rank, world_size, store, device) "
        "and returning the ProcessGroup (or Backend) to check.",
        epilog="exit status: 0 the group conforms (unsupported operations are reported, not failures); "
        "1 a failure was found (shrunk, printed); 2 bad input, one line on stderr (the factory can't "
        "be imported, bad arguments, or the machine can't run the pools); 128+N interrupted by signal N "
        "(SIGINT, SIGTERM) with nothing found: the partial report is printed, and written with --json.",
    )
    parser.add_argument("factory", metavar="FACTORY", help="module:callable building the ProcessGroup")
    parser.add_argument(
        "--world-size",
        "-w",
        dest="world_sizes",
        type=world_size,
        action="append",
        metavar="N",
        help=f"a world size to check; repeat for several (default {' '.join(map(str, DEFAULT_WORLD_SIZES))})",
    )
    parser.add_argument(
        "--duration",
        type=parse_duration,
        metavar="TIME",
        help="time budget for the whole check, shared by the operations: 90, 30s, 10m, 1h30m",
    )
    parser.add_argument(
        "--max-examples",
        type=positive_int,
        metavar="N",
        help="examples per operation (default: 100, or unlimited with --duration)",
    )
    parser.add_argument(
        "--ops", type=_ops, metavar="OP[,OP...]", help=f"checks to run (default all): {', '.join(all_checks())}"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="the ranks' device (default cpu)")
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"per-example timeout; past it an example is a hang (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--max-bytes",
        type=positive_int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help=f"largest tensor in an example (default {DEFAULT_MAX_BYTES})",
    )
    parser.add_argument("--seed", type=int, metavar="N", help="Hypothesis seed, for a repeatable run")
    parser.add_argument(
        "--no-database", action="store_true", help="don't read or save examples in Hypothesis's database (.hypothesis/)"
    )
    parser.add_argument(
        "--repeat-waits",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="async check: also wait() again on works already waited on, bounded at "
        "2 s (default on; gloo's send/recv Work blocks on that: a known torch bug)",
    )
    parser.add_argument(
        "--ddp-reorder",
        action="store_true",
        help="DDP check: also run DDP through a ReorderingProcessGroup over the group",
    )
    parser.add_argument(
        "--wraps",
        choices=("gloo",),
        metavar="BACKEND",
        help="the group delegates to this backend (gloo): a failure that one of gloo's known "
        "bugs explains is run again on gloo itself, on the same ranks, and where gloo gives "
        "the same result it is reported KNOWN (inherited from gloo), not as a failure",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    parser.add_argument("--verbose", "-v", action="store_true", help="let Hypothesis report its progress")
    parser.set_defaults(func=cmd_check_pg)


def _ops(text: str) -> list[str] | None:
    """An argparse type: comma-separated check names, ops registered at run time included ('' means all)."""
    from fuzzdist.conformance import all_checks

    if not text:
        return None
    ops = [o.strip() for o in text.split(",") if o.strip()]
    known = all_checks()
    unknown = [o for o in ops if o not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown ops {', '.join(unknown)}; choose from {', '.join(known)}")
    return ops


def cmd_check_pg(args: argparse.Namespace) -> int:
    """``fuzzdist check-pg``; returns the exit code (0 conforms, 1 a failure found; bad input raises UsageError)."""
    from hypothesis import settings as Settings

    from fuzzdist.conformance import DEFAULT_WORLD_SIZES, ConformanceSession, OpReport
    from fuzzdist.errors import CapabilityError, FactoryError, PoolStartupError

    # As `python -m`: modules in the current directory can be named.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    overrides: dict = {"max_examples": 100}
    if args.no_database:
        overrides["database"] = None
    settings = Settings(Settings(), **overrides)
    kwargs = dict(
        max_examples=args.max_examples,
        duration=args.duration,
        ops=args.ops,
        device=args.device,
        timeout=args.timeout,
        max_bytes=args.max_bytes,
        settings=settings,
        verbose=args.verbose,
        seed=args.seed,
        repeat_waits=args.repeat_waits,
        ddp_reorder=args.ddp_reorder,
        wraps=args.wraps,
    )
    if args.world_sizes:
        kwargs["world_sizes"] = tuple(args.world_sizes)
    _check_max_bytes(args.max_bytes, max(kwargs.get("world_sizes", DEFAULT_WORLD_SIZES)))
    check_outputs(("--json", args.json))  # before the check runs, not after
    interrupted = ""
    try:
        session = ConformanceSession(args.factory, **kwargs)
        try:
            with _interrupts():
                try:
                    session.prepare()
                    for name in session.checks:
                        session.run(name)
                except KeyboardInterrupt as exc:  # SIGINT/SIGTERM: the partial report is printed and written
                    interrupted = getattr(exc, "signal_name", "SIGINT")
        finally:
            session.close()
    except (FactoryError, CapabilityError, PoolStartupError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    report = session.report
    report.interrupted = interrupted
    if interrupted:  # every check the run would have made is listed, the ones it never reached too
        for name in session.checks:
            if name not in report.ops:
                report.ops[name] = OpReport(name, note=f"not reached before {interrupted}")
    print(report.summary(), flush=True)
    if args.json:
        from fuzzdist.campaign.output import write_output

        try:
            write_output(args.json, json.dumps(report.to_json(), indent=2) + "\n")
        except OSError as exc:  # the check's verdict stands: the exit code says it, the summary above shows it
            print(
                f"fuzzdist check-pg: can't write --json {args.json} ({exc.strerror or exc}); the summary "
                "above is the whole report",
                file=sys.stderr,
            )
    if not report.conforms:
        return EXIT_FOUND
    return 128 + signal.Signals[interrupted].value if interrupted else EXIT_OK


def _check_max_bytes(max_bytes: int, world_size: int) -> None:
    """Refuse a --max-bytes this machine can't hold at the largest world size: each of the ranks may hold
    a gather's output (one tensor per rank) beside its input, so about 2 * world_size**2 tensors of
    that size at once."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return  # unknown: nothing to bound by
    most = memory // (2 * world_size * world_size)
    if max_bytes > most:
        raise UsageError(
            f"--max-bytes {max_bytes}: at world size {world_size} the ranks would hold about "
            f"{2 * world_size * world_size} tensors of that size at once, more than this machine's "
            f"{memory / 2**30:.1f} GiB of memory; pass at most {most}"
        )


@contextlib.contextmanager
def _interrupts() -> Iterator[None]:
    """The first SIGINT or SIGTERM raises Terminated (a KeyboardInterrupt) where the check stands, so
    the report so far is printed and written; later ones wait for that (closing the pools is bounded)."""
    from fuzzdist.errors import Terminated
    from fuzzdist.pool.signals import interrupting

    got: list[str] = []

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        got.append(name)
        if len(got) == 1:
            raise Terminated(name)

    with interrupting(handler):
        yield
