"""What explaining hangs costs, and what it saves: the flight recorder per example, and finding a planted hang.

Run:  python bench/hang_detection.py [--only overhead|shrink] [--examples 1500] [--rounds 8] [--timeout 5]

On 2 CPU ranks over gloo, in one run:

  overhead  The per-example cost of torch's flight recorder, which the ranks switch on to explain hangs:
            a small property (broadcast a drawn float32 tensor of 1-16 elements from a drawn rank, check
            every rank holds it) run under Hypothesis through two RankPools, one with the recorder on
            (fuzzdist's default) and one started with TORCH_FR_BUFFER_SIZE=0 (off), on the same
            derandomized examples.  Each round starts two fresh pools and alternates which one is created
            and run first (two pools of the same kind, side by side, can differ by 10-30 us per example
            on this machine, as much as the recorder's cost).  Then ``pool.run`` alone on those examples,
            each example through both pools back to back, the order alternating: the recorder's cost
            without Hypothesis's share, by the finest interleaving.  Reported: medians of the rounds,
            on/off (target: within a few percent of 1.0), and the median of the paired differences
            on-off, for each creation order and their mean (which cancels the creation order's effect).
  shrink    The wall time for Hypothesis to find and shrink a planted deadlock (for n > 5 rank 0
            all_reduces while rank 1 waits in a broadcast from rank 0) to its minimal example n=6, with
            the pool's timeout at --timeout seconds; every hanging example costs the time to tell it hangs
            plus a pool restart.  The pool's start-up is not counted.

The shrink part runs against whichever fuzzdist is imported, so before and after a change compare as

    git worktree add /tmp/before OLD_COMMIT
    PYTHONPATH=/tmp/before python bench/hang_detection.py --only shrink
    python bench/hang_detection.py --only shrink

(the first line printed says which fuzzdist was measured).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import fuzzdist
from fuzzdist import RankPool

WORLD_SIZE = 2
SMALL = st.tuples(
    st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=16), st.integers(0, WORLD_SIZE - 1)
)


# -- rank functions (top-level: the spawned ranks re-import this module to find them) --------------


def broadcast_small(ctx, values: list[float], src: int) -> list[float] | None:
    """Broadcast ``values`` from ``src``; None if this rank then holds exactly them."""
    expected = torch.tensor(values, dtype=torch.float32)
    tensor = expected.clone() if ctx.rank == src else torch.zeros_like(expected)
    dist.broadcast(tensor, src, group=ctx.group)
    return None if torch.equal(tensor, expected) else tensor.tolist()


def recorder_entries(ctx) -> int | None:
    """How many records torch's flight recorder holds on this rank (None: this torch can't say)."""
    import json

    dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace_json", None)
    return None if dump is None else len(json.loads(dump(includeCollectives=True)).get("entries", ()))


def planted_hang(ctx, n: int) -> None:
    """A deadlock for n > 5: rank 0 all_reduces while the other ranks wait in a broadcast from rank 0."""
    t = torch.ones(2, dtype=torch.int64)
    dist.all_reduce(t)
    if n > 5:
        if ctx.rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(torch.zeros(2, dtype=torch.int64), src=0)


# -- overhead -----------------------------------------------------------------------------------------


def _pool(recorder: bool) -> RankPool:
    """A started pool whose ranks keep the flight recorder or not (they inherit the environment)."""
    saved = os.environ.pop("TORCH_FR_BUFFER_SIZE", None)
    if not recorder:
        os.environ["TORCH_FR_BUFFER_SIZE"] = "0"
    try:
        return RankPool(WORLD_SIZE, timeout=60).start()
    finally:
        os.environ.pop("TORCH_FR_BUFFER_SIZE", None)
        if saved is not None:
            os.environ["TORCH_FR_BUFFER_SIZE"] = saved


def per_example_us(pool: RankPool, n: int) -> tuple[float, list]:
    """Microseconds per example of the broadcast property through ``pool`` under Hypothesis; and the examples."""
    seen: list = []

    @settings(
        max_examples=n,
        database=None,
        derandomize=True,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(example=SMALL)
    def prop(example):
        seen.append(example)
        assert pool.run(broadcast_small, *example) == [None] * WORLD_SIZE

    start = time.perf_counter()
    prop()
    return (time.perf_counter() - start) / len(seen) * 1e6, seen


def paired_us(pools: dict[str, RankPool], examples: list) -> dict[str, list[float]]:
    """Microseconds of each ``pool.run`` alone: each example through every pool back to back, the order alternating."""
    times: dict[str, list[float]] = {name: [] for name in pools}
    for i, example in enumerate(examples):
        for name in list(pools) if i % 2 == 0 else list(pools)[::-1]:
            start = time.perf_counter()
            assert pools[name].run(broadcast_small, *example) == [None] * WORLD_SIZE
            times[name].append((time.perf_counter() - start) * 1e6)
    return times


def overhead(examples: int, rounds: int) -> None:
    runs: dict[str, list[float]] = {"on": [], "off": [], "run_on": [], "run_off": []}
    # on-off of one example run back to back (us), by which pool was created first; and the off pool's runs (us).
    differences: dict[str, list[float]] = {"on": [], "off": []}
    singles: list[float] = []
    for r in range(rounds):
        # Fresh pools each round, created in alternating order: two pools of one kind differ by 10-30 us per example.
        order = ("on", "off") if r % 2 == 0 else ("off", "on")
        pools = {name: _pool(name == "on") for name in order}
        try:
            for name in order:
                per_example_us(pools[name], 100)  # warm-up
                if r == 0:
                    print(f"recorder {name}: records per rank {pools[name].run(recorder_entries)}", file=sys.stderr)
            for name in order:
                us, drawn = per_example_us(pools[name], examples)
                runs[name].append(us)
            paired = paired_us(pools, drawn)
        finally:
            for pool in pools.values():
                pool.close()
        for name, us in paired.items():
            runs["run_" + name].append(statistics.mean(us))
        differences[order[0]].extend(a - b for a, b in zip(paired["on"], paired["off"], strict=True))
        singles.extend(paired["off"])
        print(
            f"round {r + 1} ({order[0]} created first): " + ", ".join(f"{k} {v[-1]:.0f} us" for k, v in runs.items()),
            file=sys.stderr,
        )
    med = {k: statistics.median(v) for k, v in runs.items()}
    rows: dict = {}
    for label, on, off in (("hypothesis", "on", "off"), ("pool.run", "run_on", "run_off")):
        ratios = [a / b for a, b in zip(runs[on], runs[off], strict=True)]
        rows[f"{label}: us/example on, off"] = f"{med[on]:.0f}, {med[off]:.0f} (on-off {med[on] - med[off]:+.0f})"
        rows[f"{label}: on/off of the medians"] = f"{med[on] / med[off]:.3f}"
        rows[f"{label}: on/off per round"] = (
            f"median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}"
        )
    single = statistics.median(singles)
    for first, diffs in differences.items():
        if diffs:
            diff = statistics.median(diffs)
            rows[f"pool.run: on-off, median of pairs, {first} created first"] = (
                f"{diff:+.1f} us ({diff / single:+.2%} of a median run)"
            )
    if all(differences.values()):
        both = statistics.mean(statistics.median(d) for d in differences.values())
        rows["pool.run: on-off, creation order cancelled"] = f"{both:+.1f} us ({both / single:+.2%})"
    _table(rows | {"examples per round": examples, "rounds": rounds})


# -- shrink -------------------------------------------------------------------------------------------


def shrink(timeout: float) -> None:
    start = time.perf_counter()
    pool = RankPool(WORLD_SIZE, timeout=timeout).start()
    startup = time.perf_counter() - start
    calls: list[tuple[int, float, float, str]] = []  # (n, s waiting for a restarted pool, s in pool.run, error)

    @settings(max_examples=200, database=None, derandomize=True, deadline=None)
    @given(n=st.integers(0, 100))
    def prop(n):
        t0 = time.perf_counter()
        pool.start()  # after a hang: wait for the restarted ranks (run() would wait the same)
        t1 = time.perf_counter()
        error = ""
        try:
            pool.run(planted_hang, n)
        except Exception as exc:
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
            raise
        finally:
            calls.append((n, t1 - t0, time.perf_counter() - t1, error))
            print(f"  n={n:<3} restart wait {t1 - t0:5.2f}s  run {calls[-1][2]:5.2f}s  {error}", file=sys.stderr)

    start = time.perf_counter()
    try:
        prop()
    except Exception:  # noqa: BLE001 - the planted hang, shrunk
        pass
    else:
        sys.exit("the planted hang was not found")
    finally:
        pool.close()
    elapsed = time.perf_counter() - start
    hung = [run for _, _, run, error in calls if error]
    restarts = [wait for _, wait, _, _ in calls if wait > 0.5]
    first = next(i for i, call in enumerate(calls) if call[3])
    _table(
        {
            "to_shrunk_failure_s": f"{elapsed:.1f}",
            "to_first_failure_s": f"{sum(c[1] + c[2] for c in calls[: first + 1]):.1f}",
            "shrunk_example": f"n={calls[-1][0]}" + ("" if calls[-1][0] == 6 else "  (NOT n=6)"),
            "examples_run / hung": f"{len(calls)} / {len(hung)}",
            "s_to_tell_a_hang (median)": f"{statistics.median(hung):.2f}",
            "s_per_pool_restart (median)": f"{statistics.median(restarts):.2f} ({len(restarts)} waited for)"
            if restarts
            else "-",
            "pool_timeout_s": timeout,
            "pool_startup_s (not counted)": f"{startup:.1f}",
        }
    )


def _table(figures: dict) -> None:
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"  {key:<{width}}  {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["overhead", "shrink"], help="run one part only")
    parser.add_argument("--examples", type=int, default=1500, help="overhead: examples per pool and round")
    parser.add_argument("--rounds", type=int, default=8, help="overhead: interleaved rounds; medians are reported")
    parser.add_argument("--timeout", type=float, default=5.0, help="shrink: the pool's timeout in seconds")
    args = parser.parse_args()
    print(f"fuzzdist {os.path.dirname(fuzzdist.__file__)}, torch {torch.__version__}, {os.cpu_count()} cpus")
    if args.only in (None, "overhead"):
        print("overhead: the broadcast property per example, flight recorder on vs off")
        overhead(args.examples, args.rounds)
    if args.only in (None, "shrink"):
        print("shrink: find and shrink a planted deadlock")
        shrink(args.timeout)


if __name__ == "__main__":
    main()
