"""A/B of the pool's cost per example between two checkouts of fuzzdist (say, before and after a change).

    python bench/pool_run_ab.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 4] [--examples 400]

Each round runs, in a fresh process per checkout and alternating between them, a 2-rank CPU
RankPool over the broadcast property's rank function on the same pre-drawn examples (no
Hypothesis), and prints the median microseconds per ``pool.run`` of 7 chunks.  Interleaving
the checkouts spreads the machine's noise over both; compare the medians of the rounds.

It also prints the CPU time per ``pool.run`` summed over the driver and every rank process (from
/proc: Linux), which the machine's other load barely moves: on a shared machine, compare that.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import os, statistics, sys, time
import torch
from fuzzdist import RankPool
from fuzzdist.strategies import TensorSpec
try:
    from fuzzdist.properties.broadcast import broadcast_and_check
except ImportError:  # a checkout from before the properties became library code
    sys.path.insert(0, "properties")
    from test_broadcast import broadcast_and_check

def cpu_s(pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return total

def main(examples):
    specs = [TensorSpec((n % 7 + 1, 3), torch.float32) for n in range(50)]
    with RankPool(2) as pool:
        for i in range(200):  # warm-up
            pool.run(broadcast_and_check, specs[i % 50], i % 2, i)
        chunks = []
        cpu0 = cpu_s(pool.pids)
        for _ in range(7):
            start = time.perf_counter()
            for i in range(examples):
                pool.run(broadcast_and_check, specs[i % 50], i % 2, i)
            chunks.append((time.perf_counter() - start) / examples * 1e6)
        cpu = (cpu_s(pool.pids) - cpu0) / (7 * examples) * 1e6
    print(f"{statistics.median(chunks):.1f} {cpu:.1f}")

if __name__ == "__main__":
    main(int(sys.argv[1]))
"""


def _one(checkout: str, examples: int) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(examples)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--examples", type=int, default=400, help="examples per chunk (7 chunks a run)")
    args = parser.parse_args()
    results: dict[str, list[float]] = {"old": [], "new": []}
    cpus: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for name, checkout in (("old", args.old), ("new", args.new)):
            wall, cpu = _one(checkout, args.examples)
            results[name].append(wall)
            cpus[name].append(cpu)
            print(f"round {r + 1} {name}: {wall:.1f} us per pool.run, {cpu:.1f} CPU us (driver + ranks)", flush=True)
    old, new = statistics.median(results["old"]), statistics.median(results["new"])
    print(f"median old {old:.1f} us, new {new:.1f} us, new/old {new / old:.3f}")
    old, new = statistics.median(cpus["old"]), statistics.median(cpus["new"])
    print(f"median CPU per pool.run (driver + ranks): old {old:.1f} us, new {new:.1f} us, new/old {new / old:.3f}")


if __name__ == "__main__":
    main()
