"""Where one example's time goes in a RankPool: the µs of each stage, measured stage by stage.

Run:  python bench/pool_stages.py [--examples 2000] [--rounds 3] [--compare OTHER_CHECKOUT]

Each stage is timed on its own, in a tight loop, with the code the pool runs (no stamps in the pool), in
CPU µs of the thread (the machine's other load cancels out); the round trips in wall-clock µs:

  driver  (this process, under a Hypothesis test context where the pool would be)
    pickle the call       controller.pickle_call(fn, args, kwargs) for the broadcast property's call
    seed                  controller.derive_seed(payload)
    coverage events       _coverage.record(args, kwargs) inside a running Hypothesis test
    run message           messages.run(...) around the payload
    driver CPU per pool.run  the driver thread's CPU time in one pool.run of a no-op (send, poll, collect...)
  rank    (a spawned process set up as a rank is: output captured, flight recorder on, a gloo group)
    unpickle              messages.load(message) and pickle.loads(payload)
    isolation snapshot    _isolation.StateGuard()
    isolation restore     guard.restore() after a no-op call
    seeding               _isolation.seed_everything(seed)
    rank output capture   entering and leaving rank_output.example() with nothing written
    flight-recorder book  rank_state.begin_example / end_example
    reply                 messages.ok(...) of a None result
    execute (all)         worker.execute(ctx, ...) of a no-op function: the rank's whole share
  round trips  (wall time: a real 2-rank RankPool, and bare pipes to 2 echo processes for the transport floor)
    socketpair ping-pong  send_bytes + poll + recv_bytes to 2 processes that echo over Pipe(duplex=True)
    pipe ping-pong        the same over two one-way pipes each (Pipe(duplex=False)): wake-up and transport
    pool.run no-op        a whole example through the pool, fn does nothing
    pool.run broadcast    the broadcast property's rank function (one collective: the per-example barrier)

``--compare OTHER`` runs the same measurements with OTHER's fuzzdist (a checkout; `git worktree add`
one for a commit), alternating the two checkouts per round, and prints both columns (medians).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

STAGES_DRIVER = ("pickle the call", "seed", "coverage events", "run message", "driver CPU per pool.run")
STAGES_RANK = (
    "unpickle",
    "isolation snapshot",
    "isolation restore",
    "seeding",
    "rank output capture",
    "flight-recorder book",
    "reply",
    "execute (all)",
)
STAGES_TRIP = ("socketpair ping-pong", "pipe ping-pong", "pool.run no-op", "pool.run broadcast")


def noop(ctx: Any, *args: Any) -> None:
    """A rank function that does nothing (what the pool costs on its own)."""


def _per_call_us(fn: Callable[[], object], n: int, clock: Callable[[], int] = time.thread_time_ns) -> float:
    """Median over 5 chunks of the µs one call of fn takes: CPU time of this thread by default (a stage
    in one process: the time the machine's other load takes the CPU away is not counted), else ``clock``."""
    chunks = []
    for _ in range(5):
        start = clock()
        for _ in range(n):
            fn()
        chunks.append((clock() - start) / n / 1e3)
    return statistics.median(chunks)


def _call() -> tuple[Any, tuple, dict]:
    import torch

    from fuzzdist.properties import broadcast as prop
    from fuzzdist.strategies import TensorSpec

    return prop.broadcast_and_check, (TensorSpec((5, 3), torch.float32), 1, 1234), {}


def measure_driver(n: int) -> dict[str, float]:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from fuzzdist.pool import controller, messages
    from fuzzdist.pool import input_coverage as _coverage

    fn, args, kwargs = _call()
    payload = controller.pickle_call(fn, args, kwargs)
    out: dict[str, float] = {}
    out["pickle the call"] = _per_call_us(lambda: controller.pickle_call(fn, args, kwargs), n)
    out["seed"] = _per_call_us(lambda: controller.derive_seed(payload), n)
    out["run message"] = _per_call_us(lambda: messages.run(1, 2, payload, None), n)

    @settings(max_examples=1, database=None, deadline=None)
    @given(st.just(0))
    def inside(_: int) -> None:  # event() needs a running test
        out["coverage events"] = _per_call_us(lambda: _coverage.record(args, kwargs), n)

    inside()
    return out


def _rank_side(conn: Any, n: int, tmpdir: str) -> None:
    """In a spawned process set up the way fuzzdist.pool.rank.spawned.rank_main sets up a rank; times its stages."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    from fuzzdist.pool.rank import rank_output, rank_state

    rank_output.install(os.path.join(tmpdir, "rank.out"))
    rank_state.enable_flight_recorder()
    import pickle

    import torch
    import torch.distributed as dist

    from fuzzdist.pool import controller, messages
    from fuzzdist.pool.rank import isolation as _isolation
    from fuzzdist.pool.rank import worker
    from fuzzdist.pool.rank.context import RankContext

    torch.set_num_threads(1)
    store = dist.FileStore(os.path.join(tmpdir, "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    ctx = RankContext(0, 1, torch.device("cpu"), "gloo", dist.group.WORLD, store, tmpdir)
    fn, args, kwargs = _call()
    payload = controller.pickle_call(fn, args, kwargs)
    message = messages.run(1, 2, payload, None)
    noop_payload = controller.pickle_call(noop, (), {})
    out: dict[str, float] = {}

    def unpickle() -> None:
        _, fields = messages.load(message)
        pickle.loads(fields["payload"])

    out["unpickle"] = _per_call_us(unpickle, n)
    out["isolation snapshot"] = _per_call_us(_isolation.StateGuard, n)

    def restore() -> None:
        _isolation.StateGuard().restore()

    out["isolation restore"] = _per_call_us(restore, n) - out["isolation snapshot"]
    out["seeding"] = _per_call_us(lambda: _isolation.seed_everything(1234), n)

    def capture() -> None:
        with rank_output.example():
            pass

    out["rank output capture"] = _per_call_us(capture, n)

    def book() -> None:
        rank_state.begin_example(0, 1)
        rank_state.end_example()

    out["flight-recorder book"] = _per_call_us(book, n)
    out["reply"] = _per_call_us(lambda: messages.ok(1, None, [], None, 0.001), n)
    seq = iter(range(1, 10**9))
    out["execute (all)"] = _per_call_us(lambda: worker.execute(ctx, next(seq), 1234, noop_payload), n)
    dist.destroy_process_group()
    conn.send(out)


def measure_rank(n: int) -> dict[str, float]:
    context = mp.get_context("spawn")
    parent, child = context.Pipe()
    with tempfile.TemporaryDirectory(prefix="fuzzdist-stages-") as tmpdir:
        p = context.Process(target=_rank_side, args=(child, n, tmpdir))
        p.start()
        if not parent.poll(300):
            p.kill()
            raise RuntimeError("the rank-side measurement did not answer within 300 s")
        out = parent.recv()
        p.join(30)
    return out


def _echo(inbox: Any, outbox: Any) -> None:
    while True:
        try:
            data = inbox.recv_bytes()
        except EOFError:
            return
        outbox.send_bytes(data)


def _ping_pong_us(n: int, world_size: int, duplex: bool) -> float:
    from fuzzdist.pool import controller, messages

    context = mp.get_context("spawn")
    links, procs = [], []
    for _ in range(world_size):
        if duplex:
            a, b = context.Pipe()
            to, back, ends = a, a, (b, b)
        else:
            inbox, to = context.Pipe(duplex=False)
            back, outbox = context.Pipe(duplex=False)
            ends = (inbox, outbox)
        p = context.Process(target=_echo, args=ends, daemon=True)
        p.start()
        links.append((to, back))
        procs.append(p)
    fn, args, kwargs = _call()
    message = messages.run(1, 2, controller.pickle_call(fn, args, kwargs), None)

    def ping() -> None:
        for to, _ in links:
            to.send_bytes(message)
        for _, back in links:
            if not back.poll(10):
                raise RuntimeError("echo process did not answer")
            back.recv_bytes()

    for _ in range(200):
        ping()
    us = _per_call_us(ping, n, time.perf_counter_ns)
    for to, back in links:
        to.close()
        back.close()
    for p in procs:
        p.join(5)
    return us


def measure_trips(n: int, world_size: int = 2) -> dict[str, float]:
    from fuzzdist import RankPool

    fn, args, _ = _call()
    out = {
        "socketpair ping-pong": _ping_pong_us(n, world_size, True),
        "pipe ping-pong": _ping_pong_us(n, world_size, False),
    }
    with RankPool(world_size, timeout=60) as pool:
        for _ in range(200):
            pool.run(noop)
            pool.run(fn, *args)
        out["driver CPU per pool.run"] = _per_call_us(lambda: pool.run(noop), n)
        out["pool.run no-op"] = _per_call_us(lambda: pool.run(noop), n, time.perf_counter_ns)
        out["pool.run broadcast"] = _per_call_us(lambda: pool.run(fn, *args), n, time.perf_counter_ns)
    return out


def measure_all(n: int) -> dict[str, float]:
    return {**measure_driver(n), **measure_rank(n), **measure_trips(n)}


def _child(checkout: str, n: int) -> dict[str, float]:
    import json

    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--inner", "--examples", str(n)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import json

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=2000, help="calls per chunk (5 chunks per stage)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (alternating checkouts with --compare)")
    parser.add_argument("--compare", help="another checkout: its column is 'before', this one 'after'")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(measure_all(args.examples)))
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    columns = {"before": args.compare, "after": here} if args.compare else {"now": here}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in columns}
    for r in range(args.rounds):
        for name, checkout in columns.items():
            runs[name].append(_child(checkout, args.examples))
            print(f"round {r + 1} {name}: done", file=sys.stderr, flush=True)
    names = list(columns)
    print(f"{'stage':<24}" + "".join(f"{'µs ' + name:>14}" for name in names) + f"{'spread':>24}")
    for group, stages in (("driver", STAGES_DRIVER), ("rank", STAGES_RANK), ("round trip", STAGES_TRIP)):
        print(f"-- {group}")
        for stage in stages:
            cells, spread = [], []
            for name in names:
                values = [run[stage] for run in runs[name] if stage in run]
                cells.append(f"{statistics.median(values):>14.1f}" if values else f"{'-':>14}")
                spread.append(f"{min(values):.0f}-{max(values):.0f}" if values else "-")
            print(f"{stage:<24}" + "".join(cells) + f"{' / '.join(spread):>24}")


if __name__ == "__main__":
    main()
