"""Examples per second of each GPU property, on this machine's GPU(s).

    python bench/gpu_properties.py [--rounds 3] [--examples 100] [--only cuda_ipc-w2,ddp-reorder-future]

For each GPU property (its strategies, its check, the pool the property test uses) this starts the
pool once, outside the timing, then runs ``--rounds`` rounds of ``--examples`` Hypothesis examples
(generate phase only, no database, no deadline), the properties interleaved round by round so the
machine's noise spreads over all of them.  It prints, per property, the median and the spread
(min-max) of examples per second over the rounds, both for the whole Hypothesis loop and for the
property's own ``check`` calls alone (the pool round trip and the ranks' work): the gap between
the two is Hypothesis's drawing.  A property whose capability is missing (no GPU, one GPU for
nccl, no cupy) is listed with the reason and not run.  A failing example stops its property and is
printed: a benchmark over a failing property measures nothing.

Takes about 2-4 minutes with the defaults on one GPU (docs/gpu-run.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st


@dataclass
class Bench:
    """One GPU property as the property test runs it."""

    name: str
    world_size: int
    backend: str
    needs: tuple[str, ...]
    strategies: Callable[[int], dict[str, st.SearchStrategy[Any]]]  # world size -> keyword strategies
    run: Callable[..., None]  # run(pool, **example)
    device: str = "cuda"


def _benches(device: str = "cuda") -> list[Bench]:
    from fuzzdist import strategies as fst
    from fuzzdist.properties import block_stream, cuda_ipc, cuda_zero_copy, ddp

    def ipc(world: int) -> dict[str, st.SearchStrategy[Any]]:
        ranks = fst.source_ranks(world)
        return {
            "nbytes": cuda_ipc.NBYTES,
            "dtype": cuda_ipc.DTYPES,
            "offset": cuda_ipc.OFFSETS,
            "count": cuda_ipc.COUNTS,
            "src": ranks,
            "writer": ranks,
            "seed": cuda_ipc.SEEDS,
            "mode": cuda_ipc.MODES,
        }

    def zero_copy(world: int) -> dict[str, st.SearchStrategy[Any]]:
        return {
            "units": cuda_zero_copy.UNITS,
            "view_dtype": st.sampled_from(cuda_zero_copy.VIEW_DTYPES),
            "src": fst.source_ranks(world),
            "seed": cuda_zero_copy.SEEDS,
            "mode": cuda_zero_copy.MODES,
        }

    def zero_copy_run(interfaces: str) -> Callable[..., None]:
        def run(pool: Any, units: int, view_dtype: Any, src: int, seed: int, mode: Any) -> None:
            cuda_zero_copy.check(pool, units * 8, view_dtype, src, seed, mode, interfaces=interfaces)

        return run

    def ddp_strategies(kind: str) -> Callable[[int], dict[str, st.SearchStrategy[Any]]]:
        def strategies(world: int) -> dict[str, st.SearchStrategy[Any]]:
            schedule = st.none() if kind in ("gloo", "nccl") else ddp.completion_schedules()
            return {"config": fst.ddp_configs(world), "dtype": ddp.DTYPES, "seed": ddp.SEEDS, "schedule": schedule}

        return strategies

    def ddp_run(kind: str) -> Callable[..., None]:
        def run(pool: Any, config: Any, dtype: Any, seed: int, schedule: Any) -> None:
            ddp.check(pool, config, dtype, seed, **ddp.pg_wrapper(kind, schedule))

        return run

    if device == "cpu":  # the harness itself, checked without a GPU: the DDP property's CPU variants
        return [
            Bench(f"ddp-{kind}-w2-cpu", 2, "gloo", (), ddp_strategies(kind), ddp_run(kind), "cpu")
            for kind in ddp.PG_KINDS
        ]
    benches = [
        Bench("cuda_ipc-w2", 2, "gloo", ("cuda",), ipc, cuda_ipc.check),
        Bench("cuda_ipc-w4", 4, "gloo", ("cuda",), ipc, cuda_ipc.check),
        Bench("cuda_zero_copy-w2", 2, "gloo", ("cuda",), zero_copy, zero_copy_run("torch")),
        Bench("cuda_zero_copy_cupy-w2", 2, "gloo", ("cuda", "cupy"), zero_copy, zero_copy_run("cupy")),
        Bench(
            "block_stream-w2",
            2,
            "gloo",
            ("cuda", "block_current_stream"),
            lambda world: {"order": block_stream.ORDERS},
            block_stream.check,
        ),
    ]
    for kind in ddp.PG_KINDS:
        benches.append(Bench(f"ddp-{kind}-w2", 2, "gloo", ("cuda",), ddp_strategies(kind), ddp_run(kind)))
    for kind in ddp.NCCL_PG_KINDS:
        benches.append(Bench(f"ddp-nccl-{kind}-w2", 2, "nccl", ("cuda",), ddp_strategies(kind), ddp_run(kind)))
    return benches


def _missing(bench: Bench) -> str | None:
    from fuzzdist.pool.capabilities.gpu import missing_gpus
    from fuzzdist.pool.capabilities.probes import missing

    reason = missing(*bench.needs) if bench.needs else None
    if reason is None and bench.backend == "nccl":
        reason = missing_gpus(bench.world_size)
    return reason


def _one_round(bench: Bench, pool: Any, examples: int) -> tuple[float, float, int]:
    """(examples/s of the whole loop, examples/s of the checks alone, examples run)."""
    in_check = [0.0]
    count = [0]

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(**bench.strategies(bench.world_size))
    def loop(**example: Any) -> None:
        start = time.perf_counter()
        bench.run(pool, **example)
        in_check[0] += time.perf_counter() - start
        count[0] += 1

    start = time.perf_counter()
    loop()
    total = time.perf_counter() - start
    return count[0] / total, count[0] / max(in_check[0], 1e-9), count[0]


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--examples", type=int, default=100, help="Hypothesis examples per property per round")
    parser.add_argument("--only", default="", help="comma-separated property names (default: all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="the pools' per-example timeout, seconds")
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: run the DDP property's CPU variants instead, to check this script without a GPU",
    )
    args = parser.parse_args()

    import torch

    from fuzzdist import RankPool

    only = {n for n in args.only.split(",") if n}
    benches = [b for b in _benches(args.device) if not only or b.name in only]
    if only - {b.name for b in benches}:
        parser.error(
            f"unknown properties {sorted(only - {b.name for b in benches})}; "
            f"known: {', '.join(b.name for b in _benches(args.device))}"
        )
    print(
        f"torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} GPU(s)"
        + (f": {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "")
    )
    print(f"command: {' '.join([sys.executable, *sys.argv])}")

    skipped: dict[str, str] = {}
    pools: dict[str, Any] = {}
    rates: dict[str, list[tuple[float, float, int]]] = {}
    failed: dict[str, str] = {}
    try:
        for bench in benches:
            reason = _missing(bench)
            if reason:
                skipped[bench.name] = reason
                continue
            pool = RankPool(bench.world_size, bench.backend, bench.device, args.timeout)
            pool.start()  # start-up is not timed
            pools[bench.name] = pool
            rates[bench.name] = []
        for _ in range(args.rounds):
            for bench in benches:
                if bench.name not in pools or bench.name in failed:
                    continue
                try:
                    rates[bench.name].append(_one_round(bench, pools[bench.name], args.examples))
                except Exception:  # noqa: BLE001 - reported, the other properties go on
                    failed[bench.name] = traceback.format_exc(limit=3)
    finally:
        for pool in pools.values():
            pool.close()

    print(f"\n{args.rounds} rounds of {args.examples} examples; examples/s: median (min-max) over the rounds")
    print(f"{'property':<32} {'whole loop':>22} {'checks alone':>22} {'examples':>9}")
    for bench in benches:
        if bench.name in skipped:
            print(f"{bench.name:<32} skipped: {skipped[bench.name]}")
            continue
        got = rates.get(bench.name, [])
        if got:
            loop = [r[0] for r in got]
            alone = [r[1] for r in got]
            print(f"{bench.name:<32} {_spread(loop):>22} {_spread(alone):>22} {sum(r[2] for r in got):>9}")
        if bench.name in failed:
            print(f"{bench.name:<32} FAILED (a failing property is not benchmarked):\n{failed[bench.name]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
