"""Does counting new lines as new behaviour help ``--schedule adaptive`` reach more code?

Run (from the repository root):

    python bench/cover_schedule.py [--duration 5m] [--rounds 3] [--json FILE]

Each round runs two campaigns of the whole suite (``properties/``, CPU, the default world sizes) for
``--duration``, both with ``--cover torch.distributed`` (so both count the lines they reach) and the
adaptive schedule, with the same ``--seed`` and each a fresh example database: *with*, as shipped
(new lines are new behaviour, beside new event values, targets and failures); *without*, the same
campaign with the lines left out of what the schedule rewards (the one change: the schedule's
``behaviour`` less the property's lines).  The order turns round every other round.  The figure is
the lines of ``torch/distributed`` reached by the whole campaign (its report's coverage section), per
round, and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = 20261126

CHILD = r"""
import sys
import fuzzdist.campaign.runner as runner
from fuzzdist.pool import line_coverage
if sys.argv[1] == "without":
    shipped = runner.behaviour
    runner.behaviour = lambda prop: shipped(prop) - line_coverage.lines_reached(prop.nodeid)
from fuzzdist.cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_one(mode: str, duration: str, seed: int, tmp: Path) -> dict:
    report = tmp / f"{mode}.json"
    argv = [
        "run",
        "--duration",
        duration,
        "--cover",
        "torch.distributed",
        "--seed",
        str(seed),
        "--database",
        str(tmp / f"db-{mode}"),
        "--report",
        str(report),
        "--junit",
        "",
        "--progress",
        "none",
    ]
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", CHILD, mode, *argv], cwd=ROOT, text=True, capture_output=True)
    wall = time.monotonic() - start
    if not report.exists():
        raise SystemExit(f"{mode}: no report ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    data = json.loads(report.read_text())
    section = data.get("coverage") or {}
    return {
        "mode": mode,
        "code": result.returncode,
        "wall_s": round(wall, 1),
        "lines": section.get("lines_reached"),
        "executable": section.get("executable_lines"),
        "percent": section.get("percent"),
        "files_reached": sum(1 for f in section.get("files", {}).values() if f.get("lines")),
        "files": len(section.get("files", {})),
        "examples": data.get("totals", {}).get("examples"),
        "properties": data.get("totals", {}).get("properties"),
        "summary": next((line for line in result.stdout.splitlines() if line.startswith("code reached")), ""),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="5m", help="each campaign's --duration (default 5m)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians (default 3)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {"with": [], "without": []}
    for r in range(args.rounds):
        order = ["with", "without"] if r % 2 == 0 else ["without", "with"]
        for mode in order:
            with tempfile.TemporaryDirectory(prefix="fuzzdist-cover-schedule-") as tmp:
                row = run_one(mode, args.duration, SEED + r, Path(tmp))
            rows[mode].append(row)
            print(
                f"round {r + 1} {mode:>7}: {row['lines']} of {row['executable']} lines ({row['percent']}%), "
                f"{row['files_reached']} of {row['files']} files, {row['examples']} examples in "
                f"{row['properties']} properties, exit {row['code']}, {row['wall_s']}s wall "
                f"(load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    med = {mode: statistics.median(r["lines"] for r in rs) for mode, rs in rows.items()}
    print(
        f"\nmedian lines of torch.distributed reached in {args.duration}: with {med['with']:.0f}, "
        f"without {med['without']:.0f} ({med['with'] - med['without']:+.0f})"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "rows": rows,
                    "medians": med,
                    "duration": args.duration,
                    "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
