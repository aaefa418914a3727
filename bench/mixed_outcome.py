"""What a failing example costs when some ranks raise and the others return (the pool then replaces them).

Run:  python bench/mixed_outcome.py [--world-sizes 2,4] [--examples 50] [--rounds 3]

After an example in which some ranks raised while the others returned, the pool starts the next example
on fresh ranks (a rank that raised may have left a collective its peers completed without it, and the
default group would be out of step).  On one CPU pool per world size (the defaults: forked ranks, a
spare set), each round times ``--examples`` examples of each kind, the kinds alternating:

  one raises   rank 1 raises, the others return: the ranks are replaced after each;
  all raise    every rank raises: the ranks are kept (the baseline);
  all pass     every rank returns.

Medians of the per-round means, milliseconds per example, and the ratio to "all raise" of the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _time(pool, fn, args, examples):
    from fuzzdist import RankError

    start, generation = time.monotonic(), pool.generation
    for _ in range(examples):
        try:
            pool.run(fn, *args)
        except RankError:
            pass
    return (time.monotonic() - start) / examples * 1000, pool.generation - generation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--examples", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import _rank_fns

    from fuzzdist import RankPool

    kinds = {
        "one raises": (_rank_fns.raise_on, (1,)),
        "all raise": (_rank_fns.raise_on_all, ()),
        "all pass": (_rank_fns.raise_on, (10**6,)),
    }
    print(f"{'ranks':>5} {'kind':<11} {'ms/example':>10} {'x all raise':>11} {'restarts':>8}")
    for world_size in (int(w) for w in args.world_sizes.split(",")):
        times: dict[str, list[float]] = {k: [] for k in kinds}
        restarts = dict.fromkeys(kinds, 0)
        with RankPool(world_size, timeout=60) as pool:
            _time(pool, _rank_fns.raise_on, (1,), 5)  # warm up, and start the spare set
            for _ in range(args.rounds):
                for kind, (fn, fn_args) in kinds.items():
                    ms, n = _time(pool, fn, fn_args, args.examples)
                    times[kind].append(ms)
                    restarts[kind] += n
        base = statistics.median(times["all raise"])
        for kind in kinds:
            ms = statistics.median(times[kind])
            print(f"{world_size:>5} {kind:<11} {ms:>10.1f} {ms / base:>11.1f} {restarts[kind]:>8}")


if __name__ == "__main__":
    main()
