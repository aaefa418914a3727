"""Examples per second of the compile family at 2 ranks, per variant, compile time apart from run time.

Run (from the repository root):

    python bench/compile.py [--examples 30] [--inductor-examples 8]

For each variant (``aot_eager``; ``inductor`` with no option, with ``reorder_for_compute_comm_overlap``, with
``bucket_all_reduces_fx="all"``) the same drawn programs (a fixed Hypothesis seed) run on one 2-rank pool,
twice: the first pass compiles each new program (cold: compile and run), the second finds every program
compiled (warm: the family's cache, :mod:`fuzzdist.properties.compile.cache`).  Reported: the examples/s of
each pass, the programs compiled, and the median seconds of a program's first call on rank 0 (compile and its
first run).  Then the DTensor programs (:mod:`fuzzdist.properties.compile.dtensor`, ``aot_eager`` and
``inductor``) the same way, and the DDP and FSDP2 cases (``aot_eager``), which build new models each example
and so compile every example: one pass, compile and run together.

Inductor's on-disk caches (``/tmp/torchinductor_$USER``) are left as they are: a first run on a
machine pays for building Inductor's C++ runtime once, later ones don't.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from fuzzdist import RankPool
from fuzzdist.properties.compile import ddp, dtensor, fsdp, functional

VARIANTS = {
    "aot_eager": ("aot_eager", ()),
    "inductor": ("inductor", ()),
    "inductor+reorder": ("inductor", (("reorder_for_compute_comm_overlap", True),)),
    "inductor+bucket": ("inductor", (("bucket_all_reduces_fx", "all"),)),
}


def _drawn(strategy: Any, n: int) -> list[Any]:
    """``n`` values of ``strategy``, the same on every run (derandomized)."""
    values: list[Any] = []

    @settings(
        max_examples=n,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(value=strategy)
    def collect(value: Any) -> None:
        values.append(value)

    collect()
    return values[:n]


def _cases(n: int) -> list[functional.CompileCase]:
    """``n`` drawn cases, the same on every run (derandomized)."""
    cases: list[functional.CompileCase] = []

    @settings(
        max_examples=n,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=functional.compile_cases(2, backends=("aot_eager",)))
    def collect(case: functional.CompileCase) -> None:
        cases.append(case)

    collect()
    return cases[:n]


def _pass(pool: RankPool, cases: list[functional.CompileCase]) -> tuple[float, list[float]]:
    """Run ``cases`` once: (seconds, rank 0's first-call seconds of each program compiled in this pass)."""
    firsts = []
    start = time.monotonic()
    for case in cases:
        outcome = pool.run(functional.compile_and_check, case)[0]
        if outcome.problems:
            raise SystemExit(f"{case} failed: {outcome.problems}")
        if not outcome.cached:
            firsts.append(outcome.compile_s)
    return time.monotonic() - start, firsts


def _timed(pool: RankPool, run: Callable[..., Any], cases: list[Any]) -> tuple[float, int]:
    """Run ``cases`` once with the rank function ``run``: (seconds, how many found problems)."""
    start = time.monotonic()
    failed = sum(1 for case in cases if pool.run(run, case)[0].problems)
    return time.monotonic() - start, failed


def _other_families(pool: RankPool, n: int, inductor_n: int) -> None:
    """DTensor programs (cold and warm passes, as the functional ones), then DDP and FSDP2 (every example
    compiles: one pass)."""
    for backend, count in (("aot_eager", n), ("inductor", inductor_n)):
        cases = _drawn(dtensor.dtensor_cases(backends=(backend,)), count)
        cold, failed = _timed(pool, dtensor.dtensor_compiled_and_check, cases)
        warm, _ = _timed(pool, dtensor.dtensor_compiled_and_check, cases)
        rates = f"{count / cold:>9.2f} {count / warm:>9.2f}"
        print(f"{'dtensor ' + backend:<17} {count:>8} {failed:>8} {rates}", flush=True)
    for name, run, strategy in (
        ("ddp aot_eager", ddp.ddp_compiled_and_check, ddp.compiled_ddp_cases(2, backends=("aot_eager",))),
        ("fsdp2 aot_eager", fsdp.fsdp_compiled_and_check, fsdp.compiled_fsdp_cases(2, backends=("aot_eager",))),
    ):
        cases = _drawn(strategy, inductor_n)
        seconds, failed = 0.0, 0
        for case in cases:  # a case torch refuses (a known bug) is timed like the others, and counted
            start = time.monotonic()
            try:
                failed += bool(pool.run(run, case)[0].problems)
            except Exception:  # noqa: BLE001 - a rank's error, counted, not the benchmark's
                failed += 1
            seconds += time.monotonic() - start
        print(f"{name:<17} {len(cases):>8} {failed:>8} {len(cases) / seconds:>9.2f} {'-':>9}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=30, help="programs per aot_eager run")
    parser.add_argument("--inductor-examples", type=int, default=8, help="programs per inductor variant")
    args = parser.parse_args()
    print(
        f"{'variant':<17} {'examples':>8} {'compiled':>8} {'cold ex/s':>9} {'warm ex/s':>9} {'median first call s':>19}"
    )
    with RankPool(2, timeout=600) as pool:
        for name, (backend, options) in VARIANTS.items():
            n = args.examples if backend == "aot_eager" else args.inductor_examples
            cases = [dataclasses.replace(c, backend=backend, options=options) for c in _cases(n)]
            cold, firsts = _pass(pool, cases)
            warm, _ = _pass(pool, cases)
            median = statistics.median(firsts) if firsts else 0.0
            print(f"{name:<17} {n:>8} {len(firsts):>8} {n / cold:>9.2f} {n / warm:>9.2f} {median:>19.2f}", flush=True)
        print(f"{'variant':<17} {'examples':>8} {'failed':>8} {'cold ex/s':>9} {'warm ex/s':>9}")
        _other_families(pool, args.examples, args.inductor_examples)


if __name__ == "__main__":
    main()
