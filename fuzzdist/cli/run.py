"""``fuzzdist run``: fuzz the property suite for a time or example budget (a campaign)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

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
from fuzzdist.cli._common import (
    EXIT_FOUND,
    EXIT_INTERNAL,
    EXIT_NOT_KEPT,
    EXIT_OK,
    check_outputs,
    parse_duration,
    positive_float,
    positive_int,
)
from fuzzdist.cli._cover import add_cover_argument, cover_summary, enable_cover
from fuzzdist.errors import UsageError

DEFAULT_REPORT = "fuzzdist-report.json"
DEFAULT_JUNIT = "fuzzdist-junit.xml"

_STACK_DUMPS = None  # the file SIGUSR1 stack dumps go to (kept open for faulthandler)


def add_parser(sub: Any) -> None:
    """Register ``run`` on the top parser's subcommands."""
    run = sub.add_parser(
        "run",
        help="fuzz the property suite for a time or example budget",
        description="Fuzz properties (default: the properties/ suite) for a time or example "
        "budget, keep looking after failures, save every failure to the example "
        "database, and report.",
    )
    add_target_argument(run)
    run.add_argument(
        "--duration",
        type=parse_duration,
        metavar="TIME",
        help="time budget, shared by the properties: 30s, 10m, 2h (counted from the first "
        "example; with --max-examples, whichever runs out first)",
    )
    run.add_argument(
        "--max-examples",
        type=positive_int,
        metavar="N",
        help="examples per property (shrinking included); default without --duration: the campaign profile's 100,000",
    )
    run.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="reproducible generation: round r of each property draws from seed N+r-1 "
        "(round 1 draws what pytest --hypothesis-seed=N draws); default: fresh randomness",
    )
    run.add_argument(
        "--schedule",
        choices=["adaptive", "even"],
        default="adaptive",
        help="how --duration is split: 'adaptive' (default) gives every property a floor of 20 "
        "examples, then slices to the properties still reaching new failures, events, "
        "targets (or, with --cover, lines) per second, relative to what each has reached; "
        "'even' gives each one equal share, once",
    )
    add_cover_argument(run)
    add_pool_arguments(run)
    run.add_argument(
        "--jobs",
        type=parse_jobs,
        default=None,
        metavar="N",
        help="campaign workers at once, each its own process with its own rank pools (with --device "
        "cuda, its own GPUs), sharing the database and splitting the properties; one progress "
        "display and one merged report (at most the cores, not under torchrun; default: on CPU "
        "one per core, as many as the memory holds at 2 GiB each, or $FUZZDIST_JOBS; "
        "1 with --device cuda or under torchrun)",
    )
    run.add_argument("--worker", type=parse_worker, default=None, help=argparse.SUPPRESS)  # I/N: set by --jobs
    run.add_argument(
        "--report",
        default=DEFAULT_REPORT,
        metavar="FILE.json",
        help=f"JSON report, rewritten atomically during the run (default {DEFAULT_REPORT}; '' for none)",
    )
    run.add_argument(
        "--html",
        default=None,
        metavar="FILE.html",
        help="also write a self-contained HTML report (throughput, failures, coverage), rewritten "
        "with the JSON one during the run (default: none; `fuzzdist report` makes one later)",
    )
    run.add_argument(
        "--junit",
        default=DEFAULT_JUNIT,
        metavar="FILE.xml",
        help=f"JUnit XML written at the end (default {DEFAULT_JUNIT}; '' for none)",
    )
    run.add_argument(
        "--progress",
        choices=["auto", "rich", "plain", "none"],
        default="auto",
        help="live display: a rich table on a terminal, plain lines otherwise (default auto)",
    )
    run.add_argument(
        "--progress-interval",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between plain progress lines (default 10)",
    )
    run.set_defaults(func=cmd_run)


class LaunchPools:
    """A pytest plugin implementing ``pytest_fuzzdist_make_pool_cache``: the pool cache this process was
    launched with (under torchrun: the one pool torchrun formed) instead of the local spawner's."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    # tryfirst: under torchrun the pool is the one torchrun formed, whatever a conftest supplies;
    # the other ranks are already serving it.
    @pytest.hookimpl(tryfirst=True)
    def pytest_fuzzdist_make_pool_cache(self, config: Any) -> Any:
        return self.cache


def _pool_cache_for_launch(args: argparse.Namespace) -> Any:
    """The rank-pool cache for how this process was launched: None means the fuzzdist
    plugin's local spawner.  Under ``torchrun``, every process joins torchrun's group;
    ranks other than 0 serve examples until rank 0 is done and exit here, and rank 0
    gets a cache holding the one pool torchrun formed."""
    from fuzzdist.pool import DEFAULT_TIMEOUT, torchrun

    if not torchrun.in_torchrun():
        return None
    from fuzzdist.errors import InvalidState

    try:
        ctx, store = torchrun.join(backend="gloo", device=args.device or "cpu", timeout=args.timeout or DEFAULT_TIMEOUT)
    except InvalidState as exc:  # e.g. several nodes and no secret to sign the store's messages with
        raise UsageError(str(exc)) from None
    if ctx.rank != 0:
        code = torchrun.serve(ctx, store)
        sys.stdout.flush()
        sys.stderr.flush()
        from fuzzdist.pool.leftovers import before_os_exit

        before_os_exit()  # multiprocessing's exit (os._exit skips it): its pymp-* folder goes
        os._exit(code)  # the campaign runs on rank 0 only
    return torchrun.TorchrunPoolCache(torchrun.TorchrunPool(ctx, store, timeout=args.timeout or DEFAULT_TIMEOUT))


def _move_junit(staged: str, junit_path: str, write_errors: dict[str, str], stream: Any) -> None:
    """pytest's JUnit file, written in a private folder, to ``junit_path`` (through the one output writer);
    a failure is one warning line and a mark in the summary, not the end of the run's report."""
    from fuzzdist.campaign.output import write_output

    try:
        if os.path.exists(staged):
            with open(staged, encoding="utf-8") as f:
                write_output(junit_path, f.read())
    except OSError as exc:
        write_errors["junit"] = exc.strerror or str(exc)
        stream.write(f"fuzzdist: warning: can't write the JUnit XML {junit_path}: {write_errors['junit']}\n")
    finally:
        shutil.rmtree(os.path.dirname(staged), ignore_errors=True)


@contextlib.contextmanager
def _interrupts(on_signal: Callable[[str], None]) -> Iterator[None]:
    """SIGINT and SIGTERM raise Terminated (a KeyboardInterrupt) so the campaign ends cleanly.

    The handlers chain to those they replace (under torchrun, the TorchrunPool's), in either order.
    """
    from fuzzdist.errors import Terminated
    from fuzzdist.pool.signals import interrupting

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        on_signal(name)
        raise Terminated(name)

    if hasattr(signal, "SIGUSR1"):  # kill -USR1 PID: every thread's stack, for a campaign that seems stuck
        import faulthandler

        global _STACK_DUMPS
        try:  # a dup of stderr: pytest's capturing redirects fd 2 while a property runs
            _STACK_DUMPS = _STACK_DUMPS or os.fdopen(os.dup(sys.stderr.fileno()), "w")
            faulthandler.register(signal.SIGUSR1, file=_STACK_DUMPS, all_threads=True, chain=False)
        except (AttributeError, RuntimeError, ValueError, OSError):
            pass
    with interrupting(handler):
        yield


def parse_jobs(text: str) -> int:
    """An argparse type for --jobs: a whole number of workers, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--jobs {text!r} is not a whole number: give the number of campaign workers, e.g. --jobs 2"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"--jobs {text}: give at least 1 worker (--jobs 1 runs the campaign in this process)"
        )
    return value


def parse_worker(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    return int(index), int(count)


def _jobs_gpus(args: argparse.Namespace) -> list[str] | None:
    """Refuse --jobs early where it can't work (see fuzzdist.campaign.jobs.check_jobs); without --jobs,
    the default (fuzzdist.campaign.default_jobs)."""
    from fuzzdist.campaign.default_jobs import available_memory, default_jobs
    from fuzzdist.campaign.jobs import check_jobs, usable_cores
    from fuzzdist.errors import JobsError
    from fuzzdist.pool import torchrun

    if args.jobs is None:  # a --jobs worker is one worker
        args.jobs = (
            1
            if args.worker is not None
            else default_jobs(args.device, torchrun.in_torchrun(), usable_cores(), available_memory())
        )
    try:
        return check_jobs(args.jobs, args.device, args.world_size, torchrun.in_torchrun(), usable_cores())
    except JobsError as exc:
        raise UsageError(str(exc)) from None


def cmd_run(args: argparse.Namespace) -> int:
    """``fuzzdist run``; returns the exit code."""
    from fuzzdist.campaign.progress import make_progress
    from fuzzdist.campaign.report import CampaignState, summary_text
    from fuzzdist.campaign.runner import CampaignPlugin

    gpus = _jobs_gpus(args)
    enable_cover(args)  # --cover: a package that can't be measured is bad input, before anything runs
    if args.worker is not None:
        from fuzzdist.campaign.lifeline import hold_to_parent, parent_from_env

        parent = parent_from_env()
        if parent is not None:
            hold_to_parent(parent)
    check_device(args.device)
    targets, database = open_targets(args, write=True)
    report_path = args.report or None
    junit_path = args.junit or None
    from fuzzdist.campaign.database import redact

    state = CampaignState(
        command=["fuzzdist", *(redact(word) for word in args.argv)],
        device=args.device,
        database=database.describe(),
        duration_s=args.duration,
        max_examples=args.max_examples,
        world_size=args.world_size,
    )
    if state.duration_s is None and state.max_examples is None:
        from hypothesis import settings

        state.max_examples = settings.get_profile("campaign").max_examples
    html_path = args.html or None
    if html_path:
        from fuzzdist.campaign.charts import missing_plotting

        reason = missing_plotting()
        if reason:
            raise UsageError(f"--html: {reason}")
    check_outputs(("--report", report_path), ("--junit", junit_path), ("--html", html_path))
    stream = terminal_stream()
    progress = make_progress(stream, args.progress, interval=args.progress_interval)
    if args.jobs > 1:
        return _run_jobs(args, state, progress, stream, report_path, junit_path, html_path, gpus, database)
    plugin = CampaignPlugin(
        targets,
        state=state,
        database=database,
        progress=progress,
        report_path=report_path,
        device=args.device,
        pytest_options=pool_options(args),
        seed=args.seed,
        html_path=html_path,
        schedule=args.schedule,
        worker=args.worker,
    )
    plugins: list[object] = [plugin]
    launched = _pool_cache_for_launch(args)
    if launched is not None:
        plugins.append(LaunchPools(launched))
    argv = pytest_args(args, targets, "campaign")
    junit_tmp = junit_folder = None
    if junit_path:  # pytest's own JUnit writer, into a folder only this user can open, moved at the end
        from fuzzdist.pool import leftovers

        leftovers.remove_leftovers()  # what SIGKILLed runs left, this one's JUnit folder among them
        junit_folder = leftovers.make_owned_dir(leftovers.JUNIT_DIR_PREFIX)
        junit_tmp = os.path.join(junit_folder.path, "junit.xml")
        argv += [f"--junitxml={junit_tmp}", "-o", "junit_suite_name=fuzzdist"]

    def on_signal(name):
        state.interrupted_by = state.interrupted_by or name

    code = None
    try:
        with _interrupts(on_signal):
            code = pytest.main(argv, plugins=plugins)
    except KeyboardInterrupt:
        state.interrupted_by = state.interrupted_by or "SIGINT"
    finally:
        progress.stop(state)
    error = collect_error(plugin)
    if junit_tmp is not None:
        assert junit_path is not None  # junit_tmp is made only for a junit_path
        if error is None:
            _move_junit(junit_tmp, junit_path, plugin.write_errors, stream)
        else:
            shutil.rmtree(os.path.dirname(junit_tmp), ignore_errors=True)
    if junit_folder is not None:
        junit_folder.release()
    if error is not None:
        raise UsageError(error)
    if state.interrupted_by:
        state.status = "interrupted"
    elif code == pytest.ExitCode.INTERNAL_ERROR:
        state.status, state.error = "error", "pytest stopped with an internal error (see above)"
    else:
        state.status = "finished"
    from fuzzdist.campaign.report import now_iso

    state.finished_wall = now_iso()
    for prop in state.properties.values():
        if prop.status == "pending":
            prop.status = "not run"
    plugin.write_report(html_now=True)
    stream.write("\n" + summary_text(state, report_path, junit_path, html_path, plugin.write_errors) + "\n")
    stream.write(cover_summary(state.started))
    stream.flush()
    return _exit_code(state)


def _run_jobs(
    args: argparse.Namespace,
    state: Any,
    progress: Any,
    stream: Any,
    report_path: str | None,
    junit_path: str | None,
    html_path: str | None,
    gpus: list[str] | None,
    database: Any,
) -> int:
    """``--jobs N``: N worker processes, watched and merged here (fuzzdist.campaign.jobs); ``database``
    the workers' own, where a dead worker's failures are read back."""
    from fuzzdist.campaign.jobs import JobsCampaign
    from fuzzdist.campaign.report import summary_text

    campaign = JobsCampaign(args, state, progress, stream, report_path, junit_path, html_path, gpus, database)
    try:
        campaign.start()
        campaign.run()
    finally:
        progress.stop(state)
        died = [w for w in campaign.workers if w.died]
        if state.interrupted_by:
            state.status = "interrupted"
        elif died:
            state.status = "error"
            state.error = "; ".join(f"worker {w.index} died: {w.died}" for w in died)
        else:
            state.status = "finished"
        campaign.finish()
    stream.write(
        "\n"
        + summary_text(state, report_path, junit_path, html_path, campaign.write_errors)
        + "\n"
        + "\n".join(campaign.summary_lines())
        + "\n"
    )
    stream.write(cover_summary(state.started, campaign.merged or {}))
    stream.flush()
    return _exit_code(state)


def _exit_code(state: Any) -> int:
    if state.not_kept():  # something found is in the report only: the most urgent thing to say
        return EXIT_NOT_KEPT
    if state.failure_count() or any(p.status == "error" for p in state.properties.values()):
        return EXIT_FOUND
    if state.error:
        return EXIT_INTERNAL
    if state.interrupted_by:
        return 128 + signal.Signals[state.interrupted_by].value
    return EXIT_OK
