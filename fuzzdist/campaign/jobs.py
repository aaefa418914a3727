"""``fuzzdist run --jobs N``: N campaign workers at once, one progress display, one report.

Each worker is ``fuzzdist run --worker I/N`` in its own process with its own rank pools (with
``--device cuda``, on its own GPUs: ``CUDA_VISIBLE_DEVICES`` is split), the same targets, budget and
example database.  Worker I takes every Nth selected property from the I-th; with fewer properties
than workers, several workers fuzz one property, their seeds (with ``--seed``) told apart by
:data:`SEED_STRIDE`.  The database is shared (a directory database or Redis works across processes),
and Hypothesis saves a failing example there the moment it is found.

Each worker rewrites its JSON report atomically on every new failure and every few seconds; the parent
polls them, merges them (:mod:`fuzzdist.campaign.merge`) into one report, HTML page, JUnit file and
summary, and shows one progress display.  A worker that dies (SIGKILL, a crash) is reported with what
killed it; its last report, with every failure it had found, stays in the merge, and the others go on.
A worker can die after its report named a failure and before Hypothesis saved it: the parent reads
each failure of a dead worker back from the database itself, and one it can't is said NOT SAVED, with
the command that replays it from the report alone.
SIGINT/SIGTERM in the parent is passed to every worker (SIGKILL after :data:`STOP_GRACE_S`), and the
merged report is still written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, TextIO

from fuzzdist.campaign.database import Database, error_line
from fuzzdist.campaign.html_report import HtmlPage
from fuzzdist.campaign.lifeline import PARENT_ENV
from fuzzdist.campaign.merge import merge_reports, state_from_report
from fuzzdist.campaign.report import (
    REPORT_INTERVAL_S,
    CampaignState,
    now_iso,
    write_json_atomic,
    write_text_atomic,
)
from fuzzdist.compat.hypothesis_internals import entry_from_blob
from fuzzdist.errors import JobsError
from fuzzdist.pool import leftovers

SEED_STRIDE = 1_000_003  # seed offset between workers fuzzing the same property
_NAME_ROOM = 255 - len(".workers-") - 8  # of the report's name in its workers' folder's (mkdtemp adds 8)
STOP_GRACE_S = 30.0  # after SIGTERM, how long a worker gets to write its report before SIGKILL
POLL_S = 0.25
OVERRUN_GRACE_S = 300.0  # a worker still running this long past --duration is stopped (every wait bounded)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def gpu_slices(visible: list[str], jobs: int, per_worker: int) -> list[str]:
    """CUDA_VISIBLE_DEVICES for each of ``jobs`` workers, each with ``per_worker`` GPUs at least."""
    need = jobs * per_worker
    if len(visible) < need:
        fits = len(visible) // per_worker
        what = f"use --jobs {fits} or fewer" if fits >= 1 else "run on a node with more GPUs"
        raise JobsError(
            f"--jobs {jobs} with --device cuda needs {need} GPUs ({jobs} workers x {per_worker} ranks "
            f"each), but {len(visible)} are visible: {what}, or a smaller --world-size"
        )
    share = len(visible) // jobs
    return [",".join(visible[i * share : (i + 1) * share]) for i in range(jobs)]


def check_jobs(
    jobs: int, device: str | None, world_size: int | None, in_torchrun: bool, cores: int, gpus: list[str] | None = None
) -> list[str] | None:
    """Refuse ``--jobs`` early where it can't help; the GPUs of each worker (None on CPU)."""
    if jobs == 1:
        return None
    if in_torchrun:
        raise JobsError(
            "--jobs is not supported under torchrun: torchrun forms one pool across its processes; "
            "run `fuzzdist run --jobs N` without torchrun (each worker spawns its own pool), "
            "or drop --jobs"
        )
    if device == "cuda":
        from fuzzdist.driver.plugin import DEFAULT_WORLD_SIZE

        return gpu_slices(gpus if gpus is not None else visible_gpus(), jobs, world_size or DEFAULT_WORLD_SIZE)
    if jobs > cores:
        raise JobsError(
            f"--jobs {jobs} is more than the {cores} cores this process may use: each worker needs a "
            f"core for its driver and more for its ranks, so more workers only slow each other down; "
            f"use --jobs {cores} or fewer"
        )
    return None


def worker_argv(args: argparse.Namespace, index: int, jobs: int, report: str, junit: str) -> list[str]:
    """The ``fuzzdist run`` command line of worker ``index``: the parent's budget, targets and pool
    options, its own report files, no display."""
    argv = [
        "run",
        *args.targets,
        "--worker",
        f"{index}/{jobs}",
        "--report",
        report,
        "--junit",
        junit,
        "--html",
        "",
        "--progress",
        "none",
        "--schedule",
        args.schedule,
    ]
    for flag, value in (
        ("--duration", args.duration),
        ("--max-examples", args.max_examples),
        ("--seed", args.seed),
        ("--device", args.device),
        ("--database", args.database),
        ("--database-password-file", getattr(args, "database_password_file", None)),
        ("--world-size", args.world_size),
        ("--timeout", args.timeout),
    ):
        if value is not None:
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    if getattr(args, "cover", None):  # each worker measures; the parent merges their reports' sections
        argv += ["--cover", args.cover]
    return argv


def work_directory(report_path: str | None) -> leftovers.Owned:
    """Where the workers' reports and logs go: next to the JSON report (a dead worker's log is kept
    there), else a temporary directory; removed at the end unless a worker died.  Owned by this process
    (:mod:`fuzzdist.pool.leftovers`): the next run removes the one a SIGKILLed parent left, first."""
    if report_path:
        folder, name = os.path.split(os.path.abspath(report_path))
        prefix = f"{name[:_NAME_ROOM]}.workers-"
        leftovers.remove_dead(folder, lambda entry: entry.startswith(prefix))
        return leftovers.make_owned_dir(prefix, dir=folder)
    leftovers.remove_leftovers()
    return leftovers.make_owned_dir(leftovers.JOBS_DIR_PREFIX)


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen
    report_path: str
    junit_path: str
    log_path: str
    log: IO[bytes]
    gpus: str | None
    started: float
    ended: float | None = None
    died: str | None = None  # what killed it, for a worker that did not finish its campaign
    stopped: bool = False  # the parent asked it to stop (SIGTERM)
    last_report: dict | None = None  # a dead worker's last report, as the parent read its failures back

    def info(self, report: dict | None) -> dict:
        own = (report or {}).get("worker") or {}
        code = self.proc.returncode
        status = "running" if code is None else "died" if self.died else (report or {}).get("status", "finished")
        return {
            "index": self.index,
            "pid": self.proc.pid,
            "status": status,
            "exit_code": code,
            "died": self.died,
            "seed": own.get("seed"),
            "properties": own.get("properties"),
            "gpus": self.gpus,
            "examples": sum(p.get("examples", 0) for p in (report or {}).get("properties", [])),
            "elapsed_s": round((self.ended or time.monotonic()) - self.started, 3),
            "log": self.log_path if self.died or code is None else None,
        }


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):  # not written yet (each write is atomic: never half a file)
        return None


def _death(worker: Worker) -> str | None:
    """Why a worker that exited did not finish its campaign (None: it did)."""
    code = worker.proc.returncode
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    if code in (0, 1, 4) or (worker.stopped and code > 128):  # 4: it found a failure the database did not keep
        return None
    return f"exited with code {code}: {_last_line(worker.log_path)}"


def _last_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f.read()[-4000:].splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(nothing in its log)"


@contextlib.contextmanager
def _forwarded_signals(on_signal: Any) -> Iterator[None]:
    """SIGINT/SIGTERM call ``on_signal`` (which stops the workers) instead of ending the parent at once."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread
            previous[sig] = signal.signal(sig, lambda signum, frame: on_signal(signal.Signals(signum).name))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def merge_junit(paths: list[str], out: str) -> None:
    """The workers' JUnit files as one test suite (a property several workers ran: its worst outcome)."""
    cases: dict[tuple[str, str], ET.Element] = {}
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        for case in root.iter("testcase"):
            key = (case.get("classname", ""), case.get("name", ""))
            if key not in cases or (len(case) and not len(cases[key])):
                cases[key] = case
    suite = ET.Element(
        "testsuite",
        name="fuzzdist",
        tests=str(len(cases)),
        failures=str(sum(1 for c in cases.values() if c.find("failure") is not None)),
        errors=str(sum(1 for c in cases.values() if c.find("error") is not None)),
        skipped=str(sum(1 for c in cases.values() if c.find("skipped") is not None)),
        time=f"{sum(float(c.get('time', 0) or 0) for c in cases.values()):.3f}",
    )
    suite.extend(cases.values())
    root = ET.Element("testsuites")
    root.append(suite)
    write_text_atomic(out, ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")


class JobsCampaign:
    """The parent of ``fuzzdist run --jobs N``: starts the workers, watches them, merges what they report."""

    def __init__(
        self,
        args: argparse.Namespace,
        state: CampaignState,
        progress: Any,
        stream: TextIO,
        report_path: str | None,
        junit_path: str | None,
        html_path: str | None,
        gpus: list[str] | None,
        database: Database | None = None,
    ) -> None:
        self.args, self.state, self.progress, self.stream = args, state, progress, stream
        self.database = database  # the workers' database, where a dead worker's failures are read back
        self.report_path, self.junit_path, self.html_path = report_path, junit_path, html_path
        self.gpus = gpus
        self._workdir = work_directory(report_path)
        self.workdir = self._workdir.path
        self.workers: list[Worker] = []
        self.merged: dict = {}
        self._seen_failures: set[tuple[str, str]] = set()
        self._unsaved_seen: set[tuple[str, str]] = set()  # failures a worker's database did not keep, said once
        self._stop_sent: float | None = None
        self._reports: list[dict | None] = []  # each worker's latest report, as last read
        self._html = HtmlPage(html_path) if html_path else None
        self.write_errors: dict[str, str] = {}

    def start(self) -> None:
        jobs = self.args.jobs
        for index in range(jobs):
            report = os.path.join(self.workdir, f"worker-{index}.json")
            junit = os.path.join(self.workdir, f"worker-{index}.xml")
            log_path = os.path.join(self.workdir, f"worker-{index}.log")
            env = dict(os.environ)
            env[PARENT_ENV] = str(os.getpid())  # the worker stops when this process dies (lifeline)
            gpus = self.gpus[index] if self.gpus else None
            if gpus is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpus
            log = open(log_path, "wb")  # noqa: SIM115 - closed when the worker ends
            proc = subprocess.Popen(
                [sys.executable, "-m", "fuzzdist", *worker_argv(self.args, index, jobs, report, junit)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # the folder stays owned while a worker writes its last report in it
                pass_fds=(self._workdir.fileno(),),
                # its own session: a Ctrl-C reaches the parent only, which passes on
                # one SIGTERM (two signals could cut a worker's last report short)
                start_new_session=True,
            )
            self.workers.append(Worker(index, proc, report, junit, log_path, log, gpus, time.monotonic()))

    def stop(self, signal_name: str) -> None:
        """Pass SIGINT/SIGTERM on to every worker (each writes its report and exits)."""
        self.state.interrupted_by = self.state.interrupted_by or signal_name
        if self._stop_sent is None:
            self._stop_sent = time.monotonic()
            for worker in self.workers:
                if worker.proc.poll() is None:
                    worker.stopped = True
                    with contextlib.suppress(ProcessLookupError):
                        worker.proc.send_signal(signal.SIGTERM)

    def run(self) -> None:
        """Watch the workers until every one has ended, merging and showing their reports."""
        self.state.status = "running"
        started = False  # the display starts once the workers have collected their properties
        next_report = 0.0
        overrun_at = (time.monotonic() + self.args.duration + OVERRUN_GRACE_S) if self.args.duration else None
        with _forwarded_signals(self.stop):
            while True:
                alive = [w for w in self.workers if w.ended is None]
                for worker in alive:
                    if worker.proc.poll() is not None:
                        self._ended(worker)
                changed = self._merge()
                if not started and all(
                    r is not None or w.ended is not None for w, r in zip(self.workers, self._reports, strict=True)
                ):
                    started = True
                    self.progress.start(self.state)
                    self.progress.note(
                        self.state,
                        f"{len(self.workers)} workers (pids " + ", ".join(str(w.proc.pid) for w in self.workers) + ")",
                    )
                if started:
                    self._announce()
                now = time.monotonic()
                if changed or now >= next_report:
                    self.write_report()
                    next_report = now + REPORT_INTERVAL_S
                self.progress.update(self.state)
                if all(w.ended is not None for w in self.workers):
                    break
                if overrun_at is not None and now >= overrun_at and self._stop_sent is None:
                    self.progress.note(self.state, "workers ran far past --duration; stopping them")
                    self.stop("SIGTERM")
                if self._stop_sent is not None and now >= self._stop_sent + STOP_GRACE_S:
                    for worker in self.workers:
                        if worker.proc.poll() is None:
                            worker.proc.kill()
                time.sleep(POLL_S)

    def _ended(self, worker: Worker) -> None:
        worker.ended = time.monotonic()
        worker.log.close()
        worker.died = _death(worker)
        if worker.died:
            report = worker.last_report = _read(worker.report_path) or {}
            failures = [f for p in report.get("properties", []) for f in p.get("failures", [])]
            self._read_back(worker, report)
            lost = sum(1 for f in failures if f.get("saved") is False)
            kept = (
                f"{lost} of the {len(failures)} distinct failure(s) it had found NOT SAVED in the database "
                "(the report keeps how to replay each)"
                if lost
                else f"the {len(failures)} distinct failure(s) it had found are kept (in the database and the report)"
            )
            self.progress.note(
                self.state,
                f"worker {worker.index} (pid {worker.proc.pid}) died: {worker.died}; {kept}; "
                f"the other workers go on; its log: {worker.log_path}",
            )

    def _read_back(self, worker: Worker, report: dict) -> None:
        """Read each failure of a dead worker's last report back from the database, as the worker would
        have at the end of its round: it may have died after its report named the failure and before
        Hypothesis saved it.  One that isn't there is marked NOT SAVED, its ``reproduce`` the ``--blob``
        replay."""
        for prop in report.get("properties", []):
            for failure in prop.get("failures", []):
                if failure.get("saved") is not True:
                    why = self._not_kept(worker, prop.get("database_key"), failure)
                    if why is not None:
                        failure["saved"], failure["not_saved"] = False, why
                        failure["reproduce"] = failure.get("replay") or failure.get("reproduce")

    def _not_kept(self, worker: Worker, key_hex: object, failure: dict) -> str | None:
        """Why ``failure`` of a dead worker can't be read back under the key ``key_hex``; None if it can."""
        entries = {entry for blob in failure.get("blobs") or [] if (entry := entry_from_blob(blob)) is not None}
        if self.database is None or not isinstance(key_hex, str) or not entries:
            return f"its worker {worker.index} died ({worker.died}) before it could be read back"
        try:
            if self.database.holds(bytes.fromhex(key_hex), entries):
                return None
        except Exception as exc:  # noqa: BLE001 - any failure to read back is reported, not raised
            return f"it can't be read back: {error_line(exc)}"
        return f"its worker {worker.index} died ({worker.died}) before the database saved it"

    def _merge(self) -> bool:
        """Merge the workers' latest reports; True if a new failure turned up."""
        reports = self._reports = [
            w.last_report if w.last_report is not None else _read(w.report_path) for w in self.workers
        ]
        for worker, report in zip(self.workers, reports, strict=True):
            if worker.died and report:  # its properties end with it
                for prop in report.get("properties", []):
                    if prop.get("status") in ("running", "pending"):
                        prop["status"] = "interrupted"
                        prop["stop_reason"] = f"its worker {worker.index} died ({worker.died})"
        base = self.state.to_dict()
        base.pop("properties", None)
        base["jobs"] = len(self.workers)
        self.merged = merge_reports(base, reports, [w.info(r) for w, r in zip(self.workers, reports, strict=True)])
        state_from_report(self.merged, self.state)
        return any(
            (prop.nodeid, origin) not in self._seen_failures
            for prop in self.state.properties.values()
            for origin in prop.failures
        )

    def _announce(self) -> None:
        """Show each failure once, as it turns up in a worker's report."""
        for prop in self.state.properties.values():
            for origin, failure in prop.failures.items():
                if (prop.nodeid, origin) not in self._seen_failures:
                    self._seen_failures.add((prop.nodeid, origin))
                    self.progress.new_failure(self.state, prop, failure.summary, failure.from_database)
                if failure.saved is False and (prop.nodeid, origin) not in self._unsaved_seen:
                    self._unsaved_seen.add((prop.nodeid, origin))
                    self.stream.write(
                        f"fuzzdist: warning: the example database did not keep a failure of "
                        f"{prop.nodeid} ({failure.not_saved}); the report keeps it: {failure.replay}\n"
                    )

    def write_report(self, html_now: bool = False) -> None:
        self.merged["status"] = self.state.status
        self.merged["updated"] = now_iso()
        if self.report_path:
            try:
                write_json_atomic(self.report_path, self.merged)
                self.write_errors.pop("json", None)
            except OSError as exc:
                self.write_errors["json"] = str(exc)
        if self._html is not None:
            error = self._html.write(self.merged, force=html_now)
            if error is None:
                self.write_errors.pop("html", None)
            else:
                self.write_errors["html"] = error

    def reap(self) -> None:
        """Make sure no worker outlives the parent: SIGTERM, then SIGKILL after STOP_GRACE_S."""
        live = [w for w in self.workers if w.proc.poll() is None]
        for worker in live:
            worker.stopped = True
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGTERM)
        for worker in live:
            try:
                worker.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait(STOP_GRACE_S)
        for worker in self.workers:
            if worker.ended is None:
                self._ended(worker)

    def finish(self) -> None:
        """The final merge: report, page, JUnit; the work directory goes unless a worker died."""
        self.reap()
        self._merge()
        self.state.finished_wall = now_iso()
        self.merged["finished"] = self.state.finished_wall
        self.merged["elapsed_s"] = round(self.state.elapsed(), 3)
        self.merged["interrupted_by"] = self.state.interrupted_by
        self.merged["error"] = self.state.error
        self.write_report(html_now=True)
        if self.junit_path:
            try:
                merge_junit([w.junit_path for w in self.workers], self.junit_path)
            except OSError as exc:  # said in the summary; the other outputs and the exit code stand
                self.write_errors["junit"] = exc.strerror or str(exc)
        if not any(w.died for w in self.workers):
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._workdir.release()
        else:
            self._workdir.keep()  # a dead worker's log, for the user: no later run removes it

    def summary_lines(self) -> list[str]:
        lines = [f"workers: {len(self.workers)}"]
        for worker, report in zip(self.workers, self._reports, strict=True):
            info = worker.info(report)
            what = f"died: {worker.died} (log: {worker.log_path})" if worker.died else info["status"]
            props = ", ".join(info["properties"] or []) or "-"
            seed = "random" if info["seed"] is None else info["seed"]  # no --seed: Hypothesis draws its own
            lines.append(
                f"  worker {worker.index} (pid {info['pid']}, seed {seed}): {what}; "
                f"{info['examples']:,} examples; {props}"
            )
        return lines
