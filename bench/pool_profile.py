"""Which driver functions cost more when ``pool.run`` runs inside a Hypothesis test than outside it.

Run:  python bench/pool_profile.py [--examples 800] [--rounds 2] [--top 12]

One 2-rank pool, the broadcast property's examples drawn once.  Each round profiles (cProfile, CPU
time) ``pool.run`` of those examples in a plain loop (outside) and called from the body of a
``@given`` test (inside; only ``pool.run`` is profiled, not Hypothesis), alternating which goes first.
Prints the driver's CPU µs per ``pool.run`` both ways and the functions whose own time per example
grew the most inside, with their call counts: a function that is called only inside is fuzzdist's or
Hypothesis's extra work; one called as often but slower is the same work done slower.

cProfile adds a fixed cost to every Python call, so functions made of many small calls look
dearer than they are: time a suspect on its own before cutting it (as the results did for
``input_coverage.record``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pool_overhead as po

from fuzzdist import RankPool
from fuzzdist.properties import broadcast as prop


def _profile(pool: RankPool, examples: list, inside: bool) -> pstats.Stats:
    prof = cProfile.Profile(timer=time.process_time)
    if inside:

        def body(example):
            prof.enable()
            pool.run(prop.broadcast_and_check, *example)
            prof.disable()

        po._hypothesis_run(len(examples), body, pool.world_size)
    else:
        prof.enable()
        for example in examples:
            pool.run(prop.broadcast_and_check, *example)
        prof.disable()
    return pstats.Stats(prof)


def _own_times(stats: pstats.Stats) -> dict[str, tuple[int, float]]:
    table = stats.stats  # type: ignore[attr-defined]  # {(file, line, name): (cc, nc, tt, ct, callers)}
    return {f"{Path(k[0]).name}:{k[1]}({k[2]})": (v[1], v[2]) for k, v in table.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=800)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    with RankPool(2, timeout=30, spares="never") as pool:
        _, examples = po._hypothesis_run(args.examples, lambda e: None, 2)
        for example in examples[:100]:  # warm up
            pool.run(prop.broadcast_and_check, *example)
        totals: dict[bool, dict[str, tuple[int, float]]] = {False: {}, True: {}}
        for r in range(args.rounds):
            for inside in (False, True) if r % 2 == 0 else (True, False):
                for name, (calls, own) in _own_times(_profile(pool, examples, inside)).items():
                    c, t = totals[inside].get(name, (0, 0.0))
                    totals[inside][name] = (c + calls, t + own)
    n = args.examples * args.rounds
    for inside in (False, True):
        total = sum(t for _, t in totals[inside].values())
        print(
            f"{'inside' if inside else 'outside'} Hypothesis: {total / n * 1e6:.0f} µs of driver CPU per pool.run "
            "(profiled)"
        )
    grew = []
    for name in totals[False].keys() | totals[True].keys():
        c_out, t_out = totals[False].get(name, (0, 0.0))
        c_in, t_in = totals[True].get(name, (0, 0.0))
        grew.append(((t_in - t_out) / n * 1e6, name, c_out / n, c_in / n))
    print(f"{'µs/example more inside':>22}  {'calls/example out':>17}  {'in':>6}  function")
    for delta, name, c_out, c_in in sorted(grew, reverse=True)[: args.top]:
        print(f"{delta:>22.1f}  {c_out:>17.1f}  {c_in:>6.1f}  {name}")


if __name__ == "__main__":
    main()
