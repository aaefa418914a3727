"""``fuzzdist check-pg``: the conformance check from the command line (``main_check_pg``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

EXIT_CONFORMS = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2

def _duration(text: str) -> float:
    """``90``, ``30s``, ``10m``, ``1h30m`` -> seconds: the same parser as ``fuzzdist run --duration``."""
    from fuzzdist.cli import parse_duration

    return parse_duration(text)


def build_parser(prog: str = "fuzzdist check-pg") -> argparse.ArgumentParser:
    from fuzzdist.conformance._calls import ALL_CHECKS
    from fuzzdist.conformance._engine import DEFAULT_MAX_BYTES, DEFAULT_WORLD_SIZES
    from fuzzdist.pool import DEFAULT_TIMEOUT

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Fuzz a torch.distributed ProcessGroup against the c10d contract. FACTORY is "
                    "'module:callable', called on every rank as factory(rank, world_size, store, device) "
                    "and returning the ProcessGroup (or Backend) to check.",
        epilog="exit status: 0 the group conforms (unsupported operations are reported, not failures); "
               "1 a failure was found (shrunk, printed); 2 bad input (the factory can't be imported, "
               "bad arguments, or the machine can't run the pools).")
    parser.add_argument("factory", metavar="FACTORY", help="module:callable building the ProcessGroup")
    parser.add_argument("--world-size", "-w", dest="world_sizes", type=int, action="append", metavar="N",
                        help=f"a world size to check; repeat for several "
                             f"(default {' '.join(map(str, DEFAULT_WORLD_SIZES))})")
    parser.add_argument("--duration", type=_duration, metavar="TIME",
                        help="time budget for the whole check, shared by the operations: 90, 30s, 10m, 1h30m")
    parser.add_argument("--max-examples", type=int, metavar="N",
                        help="examples per operation (default: 100, or unlimited with --duration)")
    parser.add_argument("--ops", metavar="OP[,OP...]",
                        help=f"checks to run (default all): {', '.join(ALL_CHECKS)}")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="the ranks' device (default cpu)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"per-example timeout; past it an example is a hang (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="N",
                        help=f"largest tensor in an example (default {DEFAULT_MAX_BYTES})")
    parser.add_argument("--seed", type=int, metavar="N", help="Hypothesis seed, for a repeatable run")
    parser.add_argument("--no-database", action="store_true",
                        help="don't read or save examples in Hypothesis's database (.hypothesis/)")
    parser.add_argument("--repeat-waits", action="store_true",
                        help="async check: also wait() again on works already waited on (gloo's send/recv "
                             "Work hangs on that)")
    parser.add_argument("--ddp-reorder", action="store_true",
                        help="DDP check: also run DDP through a ReorderingProcessGroup over the group")
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    parser.add_argument("--verbose", "-v", action="store_true", help="let Hypothesis report its progress")
    return parser


def main_check_pg(argv: Sequence[str] | None = None) -> int:
    """``fuzzdist check-pg FACTORY [options]``; returns the exit status (0, 1 or 2)."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_BAD_INPUT

    from hypothesis import settings as Settings

    from fuzzdist.conformance._calls import ALL_CHECKS
    from fuzzdist.conformance._engine import check_process_group
    from fuzzdist.conformance._rank import FactoryError
    from fuzzdist.errors import CapabilityError, PoolStartupError

    def bad(message: str) -> int:
        print(f"fuzzdist check-pg: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT

    # As `python -m`: modules in the current directory can be named.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    ops = None
    if args.ops:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()]
        unknown = [o for o in ops if o not in ALL_CHECKS]
        if unknown:
            return bad(f"unknown ops {', '.join(unknown)}; choose from {', '.join(ALL_CHECKS)}")
    world_sizes = tuple(args.world_sizes) if args.world_sizes else None
    if world_sizes and any(w < 1 for w in world_sizes):
        return bad(f"world sizes must be >= 1, got {', '.join(map(str, world_sizes))}")
    if args.max_examples is not None and args.max_examples < 1:
        return bad(f"--max-examples must be >= 1, got {args.max_examples}")
    if args.duration is not None and not args.duration > 0:
        return bad(f"--duration must be > 0, got {args.duration}")
    overrides: dict = {"max_examples": 100}
    if args.no_database:
        overrides["database"] = None
    settings = Settings(Settings(), **overrides)
    kwargs = dict(max_examples=args.max_examples, duration=args.duration, ops=ops, device=args.device,
                  timeout=args.timeout, max_bytes=args.max_bytes, settings=settings, verbose=args.verbose,
                  seed=args.seed, repeat_waits=args.repeat_waits, ddp_reorder=args.ddp_reorder)
    if world_sizes:
        kwargs["world_sizes"] = world_sizes
    try:
        report = check_process_group(args.factory, **kwargs)
    except FactoryError as exc:
        return bad(str(exc))
    except (CapabilityError, PoolStartupError, ValueError) as exc:
        return bad(str(exc))
    print(report.summary())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report_to_json(report), f, indent=2)
    return EXIT_CONFORMS if report.conforms else EXIT_FAILURE


def report_to_json(report) -> dict:
    return {
        "factory": report.factory,
        "backend": report.backend,
        "world_sizes": list(report.world_sizes),
        "conforms": report.conforms,
        "duration_s": round(report.duration_s, 3),
        "factory_errors": {str(w): msg for w, msg in report.factory_errors.items()},
        "ops": {
            name: {
                "status": r.status,
                "method": r.method,
                "examples": r.examples,
                "supported": r.supported,
                "unsupported": [str(u) for u in r.unsupported],
                "failure": None if r.failure is None else r.failure.message,
                "note": r.note,
            }
            for name, r in report.ops.items()
        },
    }
