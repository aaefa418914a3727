"""What ``--schedule adaptive`` changes against ``--schedule even`` on the same campaign.

Run (from the repository root):

    python bench/campaign_schedule.py [--duration 5m] [--rounds 1] [--seed 1] [TARGET ...]
    python bench/campaign_schedule.py --reports EVEN.json ADAPTIVE.json   # only compare two reports

Each round runs ``fuzzdist run [TARGET ...] --duration D --seed S --schedule even``, then the same with
``--schedule adaptive`` (fresh databases; the property suite by default), and prints per schedule: the
examples run, the distinct ``event()`` values reached (summed over properties), the distinct pairs of
event values, the distinct failures, the properties that ran fewer than 10 examples, and the example
count of the property that ran the fewest.  Medians over the rounds; on a shared machine a round's two
campaigns run minutes apart, so load can differ between them: compare rounds, not single figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = ("even", "adaptive")


def figures(report: dict) -> dict:
    props = [p for p in report["properties"] if p["status"] not in ("skipped", "not run")]
    return {
        "examples": sum(p["examples"] for p in props),
        "event_values": sum(len(p["events"]) for p in props),
        "event_pairs": sum(len(grid["cells"]) for p in props for grid in p.get("event_pairs", [])),
        "distinct_failures": sum(len(p["failures"]) for p in props),
        "known_bugs_seen": len({b["id"] for p in props for b in p.get("known_bugs", [])}),
        "under_10_examples": sum(1 for p in props if p["examples"] < 10),
        "fewest_examples": min((p["examples"] for p in props), default=0),
        "properties": len(props),
    }


def run(schedule: str, duration: str, seed: int, targets: list[str], tmp: Path) -> dict:
    report = tmp / f"{schedule}-{seed}.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            *targets,
            "--duration",
            duration,
            "--schedule",
            schedule,
            "--seed",
            str(seed),
            "--database",
            str(tmp / f"db-{schedule}"),
            "--report",
            str(report),
            "--junit",
            "",
            "--progress",
            "none",
        ],
        cwd=ROOT,
        text=True,
        capture_output=True,
    )
    if result.returncode not in (0, 1):
        raise SystemExit(f"--schedule {schedule} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return json.loads(report.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*")
    parser.add_argument("--duration", default="5m")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--reports",
        nargs=2,
        metavar=("EVEN.json", "ADAPTIVE.json"),
        help="compare these two reports instead of running campaigns",
    )
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {s: [] for s in SCHEDULES}
    if args.reports:
        for schedule, path in zip(SCHEDULES, args.reports, strict=True):
            rows[schedule].append(figures(json.loads(Path(path).read_text())))
    else:
        with tempfile.TemporaryDirectory(prefix="fuzzdist-bench-schedule-") as tmp:
            for r in range(args.rounds):
                for schedule in SCHEDULES:
                    rows[schedule].append(figures(run(schedule, args.duration, args.seed + r, args.targets, Path(tmp))))
                    print(f"round {r + 1} {schedule}: {rows[schedule][-1]}", file=sys.stderr)
    keys = list(rows["even"][0])
    print(f"{'':<20}" + "".join(f"{s:>12}" for s in SCHEDULES) + f"{'adaptive/even':>15}")
    for key in keys:
        even, adaptive = (statistics.median(row[key] for row in rows[s]) for s in SCHEDULES)
        ratio = f"{adaptive / even:.2f}" if even else "-"
        print(f"{key:<20}{even:>12,.0f}{adaptive:>12,.0f}{ratio:>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
