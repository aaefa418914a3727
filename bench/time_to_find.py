"""Time to find: how soon README's default campaign finds a planted bug, per property family.

Run (from the repository root):

    python bench/time_to_find.py [--duration 300] [--rounds 3] [--family F ...] [--jobs N] [TARGET ...]
    python bench/time_to_find.py --quick        # 3 families, 90 s campaigns, 1 round: a few minutes

For each family (``bench/_planted_campaign.py``: a stand-in from ``tests/helpers/planted_*.py`` planted in
the family's property), each round runs the plain ``fuzzdist run --duration D`` over the whole property
suite (fresh database, its own seed), so the schedule decides when the family's properties get time.  It
reads the campaign's JSON report as it is rewritten and records the seconds into the campaign when the
family's first failure was seen and when it was shrunk, then stops the campaign (SIGINT) - the rest of the
budget would tell nothing more.  A bug not found (or not shrunk) counts as the campaign's whole wall
time, a lower bound (marked ``>``); the times count from the campaign's start, imports, collection and
pool start-ups included, as its user waits.  Medians over the rounds, per family, then the median and
the worst family; the load average before each campaign is recorded, as the timings move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _planted_campaign import ENV, PLANTS

ROOT = Path(__file__).resolve().parents[1]
QUICK_FAMILIES = ("broadcast", "ddp", "dtensor")
POLL_S = 0.5
STOP_GRACE_S = 60.0  # after SIGINT, how long the campaign gets to write its report


@dataclass
class Found:
    """One campaign's result for its planted family (seconds into the campaign; None: not within it)."""

    family: str
    first_s: float | None
    shrunk_s: float | None
    load: float  # 1-minute load average when it started
    wall_s: float  # the whole campaign process, start-up and stop included
    examples: int  # the family's examples when it stopped

    def row(self) -> str:
        return (
            f"{self.family:<24}{fmt(self.first_s):>10}{fmt(self.shrunk_s):>10}"
            f"{self.examples:>10}{self.load:>8.1f}{self.wall_s:>8.0f}"
        )


def fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


def family_figures(report: dict, files: tuple[str, ...]) -> tuple[float | None, float | None, int]:
    """The family's first failure, its first shrunk failure (seconds into the campaign) and its examples."""
    props = [p for p in report.get("properties", []) if p["nodeid"].split("::")[0].rsplit("/", 1)[-1] in files]
    failures = [f for p in props for f in p.get("failures", []) if not f.get("from_database")]
    first = min((f["found_after_s"] for f in failures), default=None)
    shrunk = min((f.get("shrunk_after_s") or f["found_after_s"] for f in failures if f.get("shrunk")), default=None)
    return first, shrunk, sum(p["examples"] for p in props)


def read_report(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet
        return None


def campaign(
    family: str, duration_s: float, seed: int, jobs: int | None, tmp: Path, targets: tuple[str, ...] = ()
) -> Found:
    """One ``fuzzdist run`` over the suite (or ``targets``) with ``family``'s bug planted, stopped once it
    is shrunk."""
    report = tmp / f"{family}-{seed}.json"
    argv = [
        sys.executable,
        "-m",
        "fuzzdist",
        "run",
        *targets,
        "--duration",
        f"{duration_s:g}s",
        "--seed",
        str(seed),
        "--database",
        str(tmp / f"db-{family}-{seed}"),
        "--report",
        str(report),
        "--junit",
        "",
        "--progress",
        "none",
    ]
    if jobs is not None:
        argv += ["--jobs", str(jobs)]
    env = dict(os.environ, **{ENV: family})
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "bench" / "_plant_site"), str(ROOT / "tests"), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    load = os.getloadavg()[0]
    started = time.monotonic()
    log = open(tmp / f"{family}-{seed}.log", "w")  # noqa: SIM115  (closed once the campaign it logs has ended)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    files = PLANTS[family].files
    figures: tuple[float | None, float | None, int] = (None, None, 0)
    try:
        while proc.poll() is None:
            time.sleep(POLL_S)
            data = read_report(report)
            if data is not None:
                figures = family_figures(data, files)
                if figures[1] is not None:
                    break
        stop(proc, signal.SIGINT)
    finally:
        stop(proc, signal.SIGKILL)  # the benchmark itself interrupted: its campaign goes too
        log.close()
    data = read_report(report)
    if data is not None:
        figures = family_figures(data, files)
    elif proc.returncode not in (0, 1):
        raise SystemExit(f"{family}: fuzzdist run failed ({proc.returncode}); see {log.name}")
    return Found(family, figures[0], figures[1], load, time.monotonic() - started, figures[2])


def stop(proc: subprocess.Popen, how: signal.Signals) -> None:
    """Stop a campaign still running (its whole process group: --jobs workers, ranks) with ``how``."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, how)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def summarise(results: dict[str, list[Found]]) -> list[str]:
    """Per family the median over rounds, then the median and worst family.  A campaign that did not find
    (or shrink) the bug counts as the whole campaign's wall time, a lower bound: its median is marked ``>``
    when it is one of those."""

    def median(values: list[tuple[float | None, float]]) -> tuple[float, str]:
        counted = sorted((wall if v is None else v, v is None) for v, wall in values)
        middle = statistics.median(c for c, _ in counted)
        return middle, ">" if any(miss and c <= middle for c, miss in counted) else ""

    lines = [f"{'family':<24}{'first s':>10}{'shrunk s':>10}{'found':>7}{'load':>8}"]
    firsts, shrunks = {}, {}
    for family, rows in results.items():
        firsts[family], first_mark = median([(r.first_s, r.wall_s) for r in rows])
        shrunks[family], shrunk_mark = median([(r.shrunk_s, r.wall_s) for r in rows])
        found = sum(r.first_s is not None for r in rows)
        lines.append(
            f"{family:<24}{first_mark + f'{firsts[family]:.1f}':>10}"
            f"{shrunk_mark + f'{shrunks[family]:.1f}':>10}"
            f"{f'{found}/{len(rows)}':>7}{statistics.median(r.load for r in rows):>8.1f}"
        )
    worst = max(firsts, key=lambda f: firsts[f])
    lines.append(
        f"median over families: first {statistics.median(firsts.values()):.1f} s, "
        f"shrunk {statistics.median(shrunks.values()):.1f} s; worst family {worst}: "
        f"first {firsts[worst]:.1f} s, shrunk {shrunks[worst]:.1f} s"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--family",
        action="append",
        choices=sorted(PLANTS),
        help="a family to plant (repeatable; default: every family)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="each campaign's --duration (default 300: README's 5 minutes)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="campaigns per family (default 3; seeds 1..N)")
    parser.add_argument("--jobs", type=int, default=None, help="pass --jobs N (default: fuzzdist run's default)")
    parser.add_argument(
        "--quick", action="store_true", help=f"{', '.join(QUICK_FAMILIES)}; 90 s campaigns; 1 round (unless given)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every campaign's result here")
    parser.add_argument("targets", nargs="*", help="what fuzzdist run fuzzes (default: the property suite)")
    args = parser.parse_args(argv)
    if args.quick:
        args.family = args.family or list(QUICK_FAMILIES)
        if "--duration" not in (argv or sys.argv):
            args.duration = 90.0
        if "--rounds" not in (argv or sys.argv):
            args.rounds = 1
    families = args.family or list(PLANTS)
    if args.rounds < 1 or args.duration <= 0:
        parser.error("--rounds must be at least 1 and --duration positive")
    results: dict[str, list[Found]] = {f: [] for f in families}
    with tempfile.TemporaryDirectory(prefix="fuzzdist-bench-ttf-") as tmp:
        for r in range(args.rounds):  # rounds outermost: load drifts over families alike
            for family in families:
                found = campaign(family, args.duration, r + 1, args.jobs, Path(tmp), tuple(args.targets))
                results[family].append(found)
                print(f"round {r + 1}: {found.row()}", file=sys.stderr, flush=True)
    print(
        f"fuzzdist run {' '.join(args.targets) or '(the suite)'} --duration {args.duration:g}s, "
        f"{args.rounds} round(s), cores {os.cpu_count()}"
    )
    print("\n".join(summarise(results)))
    if args.json:
        Path(args.json).write_text(json.dumps({f: [r.__dict__ for r in rows] for f, rows in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
