"""The ``fuzzdist`` command: long fuzz campaigns over the property suite, and replay of what they found.

    fuzzdist run [PATH_OR_PROPERTY ...] [--duration 10m] [--max-examples N] [--device cpu|cuda]
                 [--database DIR_OR_URL] [--report FILE.json] [--junit FILE.xml] [--seed N]
                 [--world-size N] [--timeout SECONDS] [--progress auto|rich|plain|none]
    fuzzdist replay [PATH_OR_PROPERTY ...] [--database DIR_OR_URL] [--export] [--device cpu|cuda]

Exit codes: 0 nothing failed; 1 a failure was found (run) or a stored failure
still fails (replay), or a property errored; 2 bad input (one line on stderr
says what to do); 3 pytest's own internal error; 128+N interrupted by
signal N with nothing found.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys

from fuzzdist.errors import FuzzdistError

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
DEFAULT_REPORT = "fuzzdist-report.json"
DEFAULT_JUNIT = "fuzzdist-junit.xml"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_STACK_DUMPS = None  # the file SIGUSR1 stack dumps go to (kept open for faulthandler)


class UsageError(FuzzdistError):
    """Bad input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse_duration(text: str) -> float:
    """``30s``, ``10m``, ``2h``, ``1h30m``, ``1.5h``, ``1d``; a bare number is seconds."""
    spec = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", spec):
        seconds = float(spec)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", spec)
        if not parts or "".join(n + u for n, u in parts) != spec:
            raise argparse.ArgumentTypeError(
                f"bad --duration {text!r}: use a number and a unit, e.g. 30s, 10m, 2h or 1h30m")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"bad --duration {text!r}: it must be longer than 0s")
    return seconds


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fuzzdist", description="Property-based fuzz campaigns for torch.distributed.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    sub.add_parser("check-pg", help="fuzz a ProcessGroup against the c10d contract "
                                    "(fuzzdist check-pg --help; docs/backend-authors.md)", add_help=False)

    run = sub.add_parser("run", help="fuzz the property suite for a time or example budget",
                         description="Fuzz properties (default: the properties/ suite) for a time or example "
                                     "budget, keep looking after failures, save every failure to the example "
                                     "database, and report.")
    run.add_argument("targets", nargs="*", metavar="PATH_OR_PROPERTY",
                     help="files, directories, file::test ids or bare property names (default: properties/)")
    run.add_argument("--duration", type=parse_duration, metavar="TIME",
                     help="time budget, shared by the properties: 30s, 10m, 2h (counted from the first "
                          "example; with --max-examples, whichever runs out first)")
    run.add_argument("--max-examples", type=_positive_int, metavar="N",
                     help="examples per property (shrinking included); default without --duration: "
                          "the campaign profile's 100,000")
    run.add_argument("--seed", type=int, metavar="N",
                     help="reproducible generation: round r of each property draws from seed N+r-1 "
                          "(round 1 draws what pytest --hypothesis-seed=N draws); default: fresh randomness")
    _common(run)
    run.add_argument("--report", default=DEFAULT_REPORT, metavar="FILE.json",
                     help=f"JSON report, rewritten atomically during the run (default {DEFAULT_REPORT}; '' for none)")
    run.add_argument("--junit", default=DEFAULT_JUNIT, metavar="FILE.xml",
                     help=f"JUnit XML written at the end (default {DEFAULT_JUNIT}; '' for none)")
    run.add_argument("--progress", choices=["auto", "rich", "plain", "none"], default="auto",
                     help="live display: a rich table on a terminal, plain lines otherwise (default auto)")
    run.add_argument("--progress-interval", type=_positive_float, default=10.0, metavar="SECONDS",
                     help="seconds between plain progress lines (default 10)")
    run.set_defaults(func=cmd_run)

    replay = sub.add_parser("replay", help="re-execute the failing examples stored in the database",
                            description="Re-execute the shrunk failing examples stored in the example database "
                                        "and print, for each, the minimal example, each failing rank's "
                                        "traceback and a pytest command that reproduces it.")
    replay.add_argument("targets", nargs="*", metavar="PATH_OR_PROPERTY",
                        help="files, directories, file::test ids or bare property names (default: properties/)")
    replay.add_argument("--export", action="store_true",
                        help="also print @example(...) lines that pin each failure as a regression test")
    _common(replay, device_default=None)
    replay.set_defaults(func=cmd_replay)
    return parser


def _common(sub: argparse.ArgumentParser, device_default: str | None = "cpu") -> None:
    what = "(default cpu)" if device_default else "(default: every device the properties run on)"
    sub.add_argument("--device", choices=["cpu", "cuda"], default=device_default,
                     help=f"run the properties' CPU-rank or GPU-rank variants {what}")
    sub.add_argument("--database", metavar="DIR_OR_URL", default=None,
                     help="example database: a directory or a redis://HOST:PORT/DB URL "
                          "(default: Hypothesis's .hypothesis/examples, which plain pytest uses)")
    sub.add_argument("--world-size", type=_positive_int, metavar="N",
                     help="ranks for properties that don't pin a world size (default 2)")
    sub.add_argument("--timeout", type=_positive_float, metavar="SECONDS",
                     help="per-example timeout on the ranks (default 30)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check-pg"]:  # conformance fuzzing of a ProcessGroup: its own parser
        from fuzzdist.conformance import main_check_pg

        return main_check_pg(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a one-line usage error (see _Parser.error)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"fuzzdist {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


# ---------------------------------------------------------------------------------------

def _check_device(device: str | None) -> None:
    if device == "cuda":
        from fuzzdist.capabilities import missing_gpus

        reason = missing_gpus(1)
        if reason:
            raise UsageError(f"--device cuda {reason}; run on a GPU node or use --device cpu")


def _open(args, *, write: bool):
    from fuzzdist.campaign.database import DatabaseError, open_database
    from fuzzdist.campaign.selection import TargetError, resolve_targets

    try:
        targets = resolve_targets(args.targets)
    except TargetError as exc:
        raise UsageError(str(exc)) from None
    try:
        database = open_database(args.database, write=write, must_exist=not write)
    except DatabaseError as exc:
        raise UsageError(str(exc)) from None
    return targets, database


def _pool_options(args) -> list[str]:
    """The fuzzdist plugin options given; node ids (cpu-w1) and a reproducing command depend on them."""
    options = []
    if args.world_size is not None:
        options.append(f"--fuzzdist-world-size={args.world_size}")
    if args.timeout is not None:
        options.append(f"--fuzzdist-timeout={args.timeout:g}")
    return options


def _pytest_args(args, targets, profile: str) -> list[str]:
    import importlib.util

    argv = [*targets.collect_args(), "-p", "no:terminal", "-p", "no:cacheprovider",
            f"--hypothesis-profile={profile}", *_pool_options(args)]
    if importlib.util.find_spec("pytest_timeout") is not None:
        argv += ["-o", "timeout=0"]  # a campaign runs far longer than any per-test timeout
    return argv


def _check_writable(path: str, flag: str) -> None:
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".fuzzdist-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"can't write {path} ({exc.strerror or exc}): pass {flag} with a path in a "
                         "writable directory") from None


def _terminal_stream():
    """A stream on the real stdout that pytest's output capturing does not redirect."""
    try:
        return os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
    except (AttributeError, OSError, ValueError):
        return sys.stdout


@contextlib.contextmanager
def _interrupts(on_signal):
    """SIGINT and SIGTERM raise Terminated (a KeyboardInterrupt) so the campaign ends cleanly."""
    from fuzzdist.campaign.runner import Terminated

    def handler(signum, frame):
        name = signal.Signals(signum).name
        on_signal(name)
        raise Terminated(name)

    previous = {}
    if hasattr(signal, "SIGUSR1"):  # kill -USR1 PID: every thread's stack, for a campaign that seems stuck
        import faulthandler

        global _STACK_DUMPS
        try:  # a dup of stderr: pytest's capturing redirects fd 2 while a property runs
            _STACK_DUMPS = _STACK_DUMPS or os.fdopen(os.dup(sys.stderr.fileno()), "w")
            faulthandler.register(signal.SIGUSR1, file=_STACK_DUMPS, all_threads=True, chain=False)
        except (AttributeError, RuntimeError, ValueError, OSError):
            pass
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _collect_error(plugin) -> str | None:
    if plugin.error:
        return plugin.error
    if plugin.collect_errors:
        where, text = plugin.collect_errors[0]
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if line.startswith("E ")), lines[-1] if lines else "")
        return (f"can't collect {where}: {last.removeprefix('E').strip()}; "
                f"run `pytest --collect-only {where}` to see the whole error")
    return None


def _pool_cache_for_launch(args):
    """The rank-pool cache for how this process was launched: None means the fuzzdist
    plugin's local spawner.  Under ``torchrun``, every process joins torchrun's group;
    ranks other than 0 serve examples until rank 0 is done and exit here, and rank 0
    gets a cache holding the one pool torchrun formed."""
    from fuzzdist.pool import DEFAULT_TIMEOUT, torchrun

    if not torchrun.in_torchrun():
        return None
    ctx, store = torchrun.join(backend="gloo", device=args.device or "cpu",
                               timeout=args.timeout or DEFAULT_TIMEOUT)
    if ctx.rank != 0:
        code = torchrun.serve(ctx, store)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # the campaign runs on rank 0 only
    return torchrun.TorchrunPoolCache(torchrun.TorchrunPool(ctx, store, timeout=args.timeout or DEFAULT_TIMEOUT))


def cmd_run(args) -> int:
    import pytest

    from fuzzdist.campaign.progress import make_progress
    from fuzzdist.campaign.report import CampaignState, summary_text
    from fuzzdist.campaign.runner import CampaignPlugin

    _check_device(args.device)
    targets, database = _open(args, write=True)
    report_path = args.report or None
    junit_path = args.junit or None
    state = CampaignState(command=["fuzzdist", *args.argv],
                          device=args.device, database=database.describe(), duration_s=args.duration,
                          max_examples=args.max_examples, world_size=args.world_size)
    if state.duration_s is None and state.max_examples is None:
        from hypothesis import settings

        state.max_examples = settings.get_profile("campaign").max_examples
    for path, flag in ((report_path, "--report"), (junit_path, "--junit")):
        if path:
            _check_writable(path, flag)
    stream = _terminal_stream()
    progress = make_progress(stream, args.progress, interval=args.progress_interval)
    plugin = CampaignPlugin(targets, state=state, database=database, progress=progress,
                            report_path=report_path, device=args.device, pool_cache=_pool_cache_for_launch(args),
                            pytest_options=_pool_options(args), seed=args.seed)
    argv = _pytest_args(args, targets, "campaign")
    junit_tmp = None
    if junit_path:  # pytest's own JUnit writer, into a temporary file moved in place at the end
        junit_tmp = os.path.join(os.path.dirname(os.path.abspath(junit_path)),
                                 f".{os.path.basename(junit_path)}.{os.getpid()}.tmp")
        argv += [f"--junitxml={junit_tmp}", "-o", "junit_suite_name=fuzzdist"]

    def on_signal(name):
        state.interrupted_by = state.interrupted_by or name

    code = None
    try:
        with _interrupts(on_signal):
            code = pytest.main(argv, plugins=[plugin])
    except KeyboardInterrupt:
        state.interrupted_by = state.interrupted_by or "SIGINT"
    finally:
        progress.stop(state)
    error = _collect_error(plugin)
    if junit_tmp is not None and os.path.exists(junit_tmp):
        if error is None:
            os.replace(junit_tmp, junit_path)
        else:
            os.unlink(junit_tmp)
    if error is not None:
        raise UsageError(error)
    if state.interrupted_by:
        state.status = "interrupted"
    elif code == pytest.ExitCode.INTERNAL_ERROR:
        state.status, state.error = "error", "pytest stopped with an internal error (see above)"
    else:
        state.status = "finished"
    from fuzzdist.campaign.report import _now_iso

    state.finished_wall = _now_iso()
    for prop in state.properties.values():
        if prop.status == "pending":
            prop.status = "not run"
    plugin.write_report()
    stream.write("\n" + summary_text(state, report_path, junit_path) + "\n")
    stream.flush()
    if state.failure_count() or any(p.status == "error" for p in state.properties.values()):
        return EXIT_FOUND
    if state.error:
        return EXIT_INTERNAL
    if state.interrupted_by:
        return 128 + signal.Signals[state.interrupted_by].value
    return EXIT_OK


def cmd_replay(args) -> int:
    import pytest

    from fuzzdist.campaign.replay import ReplayPlugin

    _check_device(args.device)
    targets, database = _open(args, write=False)
    stream = _terminal_stream()
    plugin = ReplayPlugin(targets, database=database, stream=stream, export=args.export, device=args.device,
                          pytest_options=_pool_options(args))
    code = pytest.main(_pytest_args(args, targets, "replay"), plugins=[plugin])
    error = _collect_error(plugin)
    if error is not None:
        raise UsageError(error)
    if code == pytest.ExitCode.INTERRUPTED:
        return 128 + signal.SIGINT.value
    plugin.print_summary()
    stream.flush()
    if code == pytest.ExitCode.INTERNAL_ERROR:
        return EXIT_INTERNAL
    return EXIT_FOUND if plugin.failing_again else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
