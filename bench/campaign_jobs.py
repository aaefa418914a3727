"""Campaign throughput with ``fuzzdist run --jobs N``: examples per second for each N, in one run.

Run (from the repository root):

    python bench/campaign_jobs.py [--jobs 1,2] [--rounds 3] [--duration 20] [--properties 4] [--world-size 2]

Each round runs, for each N in turn (interleaved, so load drifting on a shared machine hits every N
alike), ``fuzzdist run FILE --jobs N --duration D --schedule even`` on a throwaway file of
``--properties`` copies of a small property (draw an integer and a short string, one ``event()``, one
``pool.run`` echoing the integer on every rank, compare), with a fresh database.  Examples per second is
the merged report's total examples over D (each worker's clock starts at its first example, so pool
start-up is not counted; the workers run at the same time).  Prints, per N: the median over the rounds
and the spread (min-max), and the median of each round's ratio to N=1 (the headline).

``--jobs`` refuses more workers than the cores this process may use: on a 2-core machine N=4 can't run.
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

PROPERTY = """
@given(k=st.integers(0, 10**9), s=st.text(alphabet="abcd", max_size=3))
def test_echo_{i}(rank_pool, k, s):
    event(f"s={{s}}")
    assert rank_pool.run(echo, k) == [k] * rank_pool.world_size
"""


def write_properties(path: Path, count: int) -> None:
    path.write_text(
        "from hypothesis import event, given, strategies as st\n\n"
        "def echo(ctx, k):\n    return k\n" + "".join(PROPERTY.format(i=i) for i in range(count)),
        encoding="utf-8",
    )


def campaign(jobs: int, duration: float, world_size: int, tmp: Path, seed: int) -> dict:
    report = tmp / f"jobs{jobs}.json"
    start = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            "test_bench_jobs.py",
            "--jobs",
            str(jobs),
            "--duration",
            f"{duration:g}s",
            "--schedule",
            "even",
            "--world-size",
            str(world_size),
            "--database",
            str(tmp / f"db-{jobs}-{seed}"),
            "--report",
            str(report),
            "--junit",
            "",
            "--progress",
            "none",
            "--seed",
            str(seed),
        ],
        cwd=tmp,
        text=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    wall = time.monotonic() - start
    if result.returncode != 0:
        raise SystemExit(f"--jobs {jobs} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    data = json.loads(report.read_text())
    return {"examples": data["totals"]["examples"], "per_s": data["totals"]["examples"] / duration, "wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1,2", help="the N to compare, the first is the baseline (default 1,2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=20.0, help="each campaign's --duration in seconds")
    parser.add_argument("--properties", type=int, default=4)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--json", help="also write the raw rounds here")
    args = parser.parse_args()
    jobs = [int(n) for n in args.jobs.split(",")]
    rows: dict[int, list[dict]] = {n: [] for n in jobs}
    with tempfile.TemporaryDirectory(prefix="fuzzdist-bench-jobs-") as tmp:
        write_properties(Path(tmp) / "test_bench_jobs.py", args.properties)
        for r in range(args.rounds):
            for n in jobs:
                rows[n].append(campaign(n, args.duration, args.world_size, Path(tmp), seed=r))
                print(
                    f"round {r + 1} --jobs {n}: {rows[n][-1]['examples']:,} examples, "
                    f"{rows[n][-1]['per_s']:.1f}/s, wall {rows[n][-1]['wall_s']:.1f}s",
                    file=sys.stderr,
                )
    base = jobs[0]
    print(
        f"fuzzdist run --jobs N --duration {args.duration:g}s --schedule even, {args.properties} properties, "
        f"world size {args.world_size}, {os.cpu_count()} cores, median of {args.rounds} interleaved rounds"
    )
    print(f"{'N':>3}  {'examples/s':>10}  {'spread':>17}  {'vs N=' + str(base) + ' (median of rounds)':>26}")
    for n in jobs:
        per_s = [row["per_s"] for row in rows[n]]
        ratios = [row["per_s"] / b["per_s"] for row, b in zip(rows[n], rows[base], strict=True)]
        print(
            f"{n:>3}  {statistics.median(per_s):>10.1f}  {min(per_s):>7.1f} - {max(per_s):>7.1f}  "
            f"{statistics.median(ratios):>26.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
