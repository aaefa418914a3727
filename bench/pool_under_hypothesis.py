"""Where c's excess over a+b lies: the pool with and without Hypothesis driving it, in one process.

Run:  python bench/pool_under_hypothesis.py [--rounds 4] [--examples 1000] [--no-coverage] [--gc-freeze]

One 2-rank pool; each round measures, in microseconds per example:

  a   Hypothesis alone (bench/pool_overhead.py's a),
  c   the broadcast property through the pool under Hypothesis (its c),
  p   ``pool.run`` of the same broadcast over the same drawn examples, without Hypothesis,

and prints c - a - p: what running Hypothesis and the pool together costs beyond the sum of the
two, and, for c and p, the CPU time per example of the driver and of the ranks (from /proc: Linux)
with their context switches: it tells waiting (more switches) from slower work (more CPU).
``--no-coverage`` makes the pool's coverage events a no-op, ``--gc-freeze`` freezes the collector
first: each rules one suspect in or out.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pool_overhead as po

from fuzzdist import RankPool
from fuzzdist.pool import input_coverage as _coverage


def _rank_cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of the given processes so far (/proc/PID/stat; 0 off Linux)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _switches(pid: int) -> int:
    """Voluntary context switches of ``pid`` so far (how often it slept), 0 off Linux."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return sum(int(line.split(":")[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
    except OSError:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--no-coverage", action="store_true")
    parser.add_argument("--gc-freeze", action="store_true")
    args = parser.parse_args()
    if args.no_coverage:
        _coverage.record = lambda a, k: None  # type: ignore[assignment]
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    excess = []
    with RankPool(2) as pool:
        _, seen = po._hypothesis_run(args.examples, lambda example: None, 2)
        pool.run(po.prop.broadcast_and_check, *seen[0])  # warm-up
        for r in range(args.rounds):
            a, _ = po.measure_a(args.examples, 2)
            cpu = (time.process_time(), _rank_cpu_s(pool.pids), sum(map(_switches, pool.pids)))
            c = po.measure_c(pool, args.examples)
            c_cpu = (time.process_time(), _rank_cpu_s(pool.pids), sum(map(_switches, pool.pids)))
            start = time.perf_counter()
            for example in seen:
                pool.run(po.prop.broadcast_and_check, *example)
            p = (time.perf_counter() - start) / len(seen) * 1e6
            p_cpu = (time.process_time(), _rank_cpu_s(pool.pids), sum(map(_switches, pool.pids)))
            excess.append(c - a - p)
            per = 1e6 / args.examples
            print(
                f"round {r + 1}: a={a:.0f}us c={c:.0f}us p={p:.0f}us c-a-p={c - a - p:.0f}us | CPU per example: "
                f"c driver {(c_cpu[0] - cpu[0]) * per:.0f}us ranks {(c_cpu[1] - cpu[1]) * per:.0f}us "
                f"(rank sleeps {(c_cpu[2] - cpu[2]) / args.examples:.1f}); "
                f"p driver {(p_cpu[0] - c_cpu[0]) * per:.0f}us ranks {(p_cpu[1] - c_cpu[1]) * per:.0f}us "
                f"(rank sleeps {(p_cpu[2] - c_cpu[2]) / args.examples:.1f})",
                flush=True,
            )
    print(f"median c-a-p: {statistics.median(excess):.0f}us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
