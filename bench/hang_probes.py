"""How soon a certain deadlock is declared, and what probing costs a slow example that passes, per probe timing.

Run:  python bench/hang_probes.py [--configs 0.2/0.1,0.1/0.05,0.05/0.05] [--examples 20] [--rounds 3] [--json FILE]

While an example runs, the pool reads its ranks' state first after FIRST_PROBE_S, then at doubling
intervals; a certain deadlock is declared once two readings CONFIRM_PROBE_S apart agree
(fuzzdist/pool/controller.py).  Each configuration FIRST/CONFIRM is set on that module in this
interpreter, and on one 3-rank CPU pool (the defaults: forked ranks, spare set) measures, over
``--examples`` examples each:

  mismatch  wall time of ``pool.run(two_hangs, 6, 0)`` (rank 1 broadcasts where the others all-reduce),
            from the call to the RankTimeout it raises, the restart included;
  missed    the same for ``two_hangs(0, 4)`` (rank 0 all-reduces once more than the others);
  slow      wall time of a passing example that sleeps 0.6 s on every rank and then all-reduces: what
            the probes taken while it runs cost (the sleep is subtracted).

The configurations alternate within each round, the order rotating from round to round; medians
over all examples of all rounds.  Compare configurations within one run: the machine's load shifts
them all.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SLEEP_S = 0.6


def _configs(text: str) -> list[tuple[float, float]]:
    out = []
    for part in text.split(","):
        first, _, confirm = part.partition("/")
        out.append((float(first), float(confirm)))
    return out


def measure(pool, controller, config: tuple[float, float], examples: int) -> dict[str, list[float]]:
    import _rank_fns

    from fuzzdist.errors import RankTimeout

    controller.FIRST_PROBE_S, controller.CONFIRM_PROBE_S = config
    times: dict[str, list[float]] = {"mismatch": [], "missed": [], "slow": []}
    for _ in range(examples):
        for name, args in (("mismatch", (6, 0)), ("missed", (0, 4))):
            started = time.perf_counter()
            try:
                pool.run(_rank_fns.two_hangs, *args)
            except RankTimeout as exc:
                assert exc.deadlock, f"{name}: a timeout, not a declared deadlock: {exc}"
            else:
                raise AssertionError(f"{name}: the example passed")
            times[name].append(time.perf_counter() - started)
        started = time.perf_counter()
        pool.run(_rank_fns.sleep_then_all_reduce, SLEEP_S)
        times["slow"].append(time.perf_counter() - started - SLEEP_S)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--configs", default="0.2/0.1,0.1/0.05,0.05/0.05", help="FIRST/CONFIRM seconds, comma-separated"
    )
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import os

    import fuzzdist
    from fuzzdist import RankPool
    from fuzzdist.pool import controller

    configs = _configs(args.configs)
    print(f"fuzzdist from {Path(fuzzdist.__file__).parent}; load average {os.getloadavg()[0]:.1f}", flush=True)
    results: dict[tuple[float, float], dict[str, list[float]]] = {
        c: {"mismatch": [], "missed": [], "slow": []} for c in configs
    }
    with RankPool(3, timeout=20) as pool:
        pool.run(__import__("_rank_fns").noop)
        for r in range(args.rounds):
            order = configs[r % len(configs) :] + configs[: r % len(configs)]
            for config in order:
                for name, values in measure(pool, controller, config, args.examples).items():
                    results[config][name] += values
            print(f"round {r + 1} done (load average {os.getloadavg()[0]:.1f})", flush=True)
    base = configs[0]
    summary = {}
    print(
        f"\n{'FIRST/CONFIRM':>14} {'mismatch s':>11} {'missed s':>9} {'slow extra ms':>14}   vs {base[0]:g}/{base[1]:g}"
    )
    for config in configs:
        med = {k: statistics.median(v) for k, v in results[config].items()}
        ratio = {k: med[k] / statistics.median(results[base][k]) for k in ("mismatch", "missed")}
        summary[f"{config[0]:g}/{config[1]:g}"] = {
            **{k: round(v, 4) for k, v in med.items()},
            **{f"{k}_ratio": round(v, 3) for k, v in ratio.items()},
        }
        print(
            f"{config[0]:>8g}/{config[1]:<5g} {med['mismatch']:>11.3f} {med['missed']:>9.3f} "
            f"{1000 * med['slow']:>14.1f}   mismatch {ratio['mismatch']:.2f}x, missed {ratio['missed']:.2f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
