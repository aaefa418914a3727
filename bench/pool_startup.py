"""Start-up of a RankPool against torch's own harness, per world size, in one run.

Run:  python bench/pool_startup.py [--world-sizes 2,4,8] [--rounds 3]

Each round, for each world size, alternating the two:

  pool   seconds from ``RankPool(n)`` to ``.start()`` returning (every rank spawned, torch imported,
         the gloo group joined, ready for the first example); then its ``close()``.
  torch  torch's ``MultiProcContinuousTest`` (bench/_torch_harness.py, in a subprocess): its first test's
         duration minus one test's steady cost (spawn + process-group init), ``startup_first_s``; and
         ``startup_s`` = T(small class) - small * per-test (start-up plus tear-down).

Prints the medians (and the spread) per world size and pool/torch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _torch_harness

from fuzzdist import RankPool


def pool_startup(world_size: int) -> tuple[float, float]:
    """(seconds to start, seconds to close) of one RankPool."""
    start = time.perf_counter()
    pool = RankPool(world_size, timeout=60).start()
    started = time.perf_counter() - start
    start = time.perf_counter()
    pool.close()
    return started, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", default="2,4,8")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(x) for x in args.world_sizes.split(",")]
    figures: dict[int, dict[str, list[float]]] = {
        n: {"pool": [], "close": [], "torch_first": [], "torch": []} for n in sizes
    }
    for r in range(args.rounds):
        for n in sizes:
            first = r % 2 == 0  # alternate which goes first
            for which in ("pool", "torch") if first else ("torch", "pool"):
                if which == "pool":
                    started, closed = pool_startup(n)
                    figures[n]["pool"].append(started)
                    figures[n]["close"].append(closed)
                else:
                    res = _torch_harness.measure(small=2, large=12, world_size=n, timeout=600)
                    figures[n]["torch_first"].append(res["startup_first_s"])
                    figures[n]["torch"].append(res["startup_s"])
            f = figures[n]
            print(
                f"round {r + 1} n={n}: pool {f['pool'][-1]:.2f}s (close {f['close'][-1]:.2f}s), torch spawn+init "
                f"{f['torch_first'][-1]:.2f}s, torch start-up+tear-down {f['torch'][-1]:.2f}s",
                file=sys.stderr,
                flush=True,
            )

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    print(
        f"{'ranks':>5}  {'pool start, s':>20}  {'pool close, s':>20}  {'torch spawn+init, s':>20}  "
        f"{'torch start+teardown, s':>24}  {'pool/torch':>10}"
    )
    for n in sizes:
        f = figures[n]
        ratio = statistics.median(f["pool"]) / statistics.median(f["torch_first"])
        print(
            f"{n:>5}  {cell(f['pool']):>20}  {cell(f['close']):>20}  {cell(f['torch_first']):>20}  "
            f"{cell(f['torch']):>24}  {ratio:>10.2f}"
        )


if __name__ == "__main__":
    main()
