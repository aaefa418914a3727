"""How fast a RankPool starts and restarts, by start method and with or without a spare set.

Run:  python bench/pool_restart.py [--world-sizes 2,4,8] [--rounds 3] [--hangs 10] [--json FILE]

Each round, for each world size, in a fresh interpreter per configuration (so the fork server starts
cold, as a user meets it), the configurations' order rotating from round to round:

  import     seconds for a new interpreter to ``import torch, torch.distributed`` (the floor a spawned
             rank pays before it can join its group), measured in the same round.
  start      seconds from ``RankPool(n)`` to ``.start()`` returning, in a fresh interpreter: for the
             fork server this includes starting the server (its own torch import).
  start2     the same for a second pool in that interpreter (the fork server already running).
  restart    the visible restart after a hang: from the moment the pool declares a planted deadlock
             (``RankTimeout``, ranks waiting in broadcasts from different roots) to the next example
             starting on fresh ranks (the pool's recovery plus the next example's wait for its ranks),
             median of --hangs hangs in a row.
  memory     each rank's and each spare's proportional memory (PSS of its process tree, MiB).

Configurations:  spawn (every rank a new interpreter, no spares: the old default), forkserver (no
spares), forkserver+spares (the default: a spare set from the first restart on).

Prints medians over the rounds, and start/import at each world size.  Numbers drift with the
machine's load: compare configurations within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = {
    "spawn": ("spawn", "never"),
    "forkserver": ("forkserver", "never"),
    "forkserver+spares": ("forkserver", "auto"),
}


def one(world_size: int, config: str, hangs: int) -> dict:
    """In this interpreter: start, start2, restart and memory for one configuration."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _rank_fns as fns  # the rank functions, importable by the ranks

    from fuzzdist import RankPool, RankTimeout

    method, spares = CONFIGS[config]
    started = time.perf_counter()
    pool = RankPool(world_size, timeout=20, start_method=method, spares=spares).start()
    start = time.perf_counter() - started
    started = time.perf_counter()
    second = RankPool(world_size, timeout=20, start_method=method, spares="never").start()
    start2 = time.perf_counter() - started
    second.close()

    declared: list[float] = []
    recover = pool._recover

    def timed_recover(failure):  # the hang is declared when the pool turns to recovery
        declared.append(time.perf_counter())
        recover(failure)

    pool._recover = timed_recover
    restarts = []
    pool.run(fns.noop)
    for _ in range(hangs):
        try:
            pool.run(fns.different_roots, 5)
        except RankTimeout:
            pass
        else:
            raise AssertionError("the planted deadlock did not hang")
        wait_ready = pool._wait_ready
        began: list[float] = []

        def timed_wait_ready(wait_ready=wait_ready, began=began):
            wait_ready()
            began.append(time.perf_counter())  # the example is sent right after this

        pool._wait_ready = timed_wait_ready
        pool.run(fns.noop)
        del pool._wait_ready
        restarts.append(began[0] - declared[-1])
    memory = pool.memory()
    pool.close()
    mib = [round(m / 2**20, 1) if m else None for m in memory["ranks"] + memory["spares"]]
    return {
        "start": start,
        "start2": start2,
        "restart": statistics.median(restarts),
        "restart_max": max(restarts),
        "rank_mib": mib[:world_size],
        "spare_mib": mib[world_size:],
    }


def bare_import() -> float:
    code = "import time; t = time.perf_counter(); import torch, torch.distributed; print(time.perf_counter() - t)"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-sizes", default="2,4,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hangs", type=int, default=10)
    parser.add_argument("--json", default=None)
    parser.add_argument("--one", nargs=3, metavar=("WORLD_SIZE", "CONFIG", "HANGS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1], int(args.one[2]))))
        return
    sizes = [int(x) for x in args.world_sizes.split(",")]
    names = list(CONFIGS)
    results: dict = {n: {c: [] for c in names} | {"import": []} for n in sizes}
    for r in range(args.rounds):
        for n in sizes:
            order = names[r % len(names) :] + names[: r % len(names)]
            results[n]["import"].append(bare_import())
            for config in order:
                out = subprocess.run(
                    [sys.executable, __file__, "--one", str(n), config, str(args.hangs)],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                results[n][config].append(json.loads(out.stdout.strip().splitlines()[-1]))
                got = results[n][config][-1]
                print(
                    f"round {r + 1} n={n} {config}: start {got['start']:.2f}s, start2 {got['start2']:.2f}s, "
                    f"restart {got['restart']:.3f}s (max {got['restart_max']:.3f}), "
                    f"rank MiB {got['rank_mib']}, spare MiB {got['spare_mib']}",
                    file=sys.stderr,
                    flush=True,
                )

    def med(values: list[float]) -> float:
        return statistics.median(values)

    print(
        f"{'ranks':>5}  {'config':<18} {'start s':>8} {'start2 s':>9} {'restart s':>10} {'start/import':>12} "
        f"{'rank MiB':>9} {'spare MiB':>10}"
    )
    for n in sizes:
        imp = med(results[n]["import"])
        print(f"{n:>5}  {'import torch':<18} {imp:>8.2f}")
        for config in names:
            rows = results[n][config]
            rank = [m for row in rows for m in row["rank_mib"] if m is not None]
            spare = [m for row in rows for m in row["spare_mib"] if m is not None]
            print(
                f"{n:>5}  {config:<18} {med([x['start'] for x in rows]):>8.2f} "
                f"{med([x['start2'] for x in rows]):>9.2f} {med([x['restart'] for x in rows]):>10.3f} "
                f"{med([x['start'] for x in rows]) / imp:>12.2f} "
                f"{(med(rank) if rank else float('nan')):>9.1f} {(med(spare) if spare else float('nan')):>10.1f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
