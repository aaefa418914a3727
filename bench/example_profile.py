"""Where one example's CPU time goes, in the driver and the ranks together: the pool against its baselines.

Run:  python bench/example_profile.py [--examples 1000] [--rounds 2] [--rate 250] [--top 8] [--json FILE]

Needs ``py-spy`` (``pip install py-spy``).  On a 2-rank CPU pool, each round samples, with ``py-spy
record --subprocesses`` attached to this process once its warm-up is over, the same three set-ups as
``bench/pool_overhead.py``, alternating their order:

  a  Hypothesis alone: the broadcast property's strategies drawn with an empty test body;
  b  a raw 2-rank gloo loop doing the same broadcast and check on the same examples (no pool), its
     processes' start-up (spawn, import torch) subtracted: (S(n) - S(10)) / (n - 10) from a run of
     10 examples;
  c  the broadcast property through fuzzdist's pool under Hypothesis.

Only samples of threads holding the GIL are kept (``--gil``): Python's own work, in µs per example
(from the sampling rate), summed over every process: the driver and the ranks.  Without it py-spy
counts a thread that is runnable but waits for a core as busy, and on a loaded machine the pool's
waits for its pipes then look like work; with it, C++ that releases the GIL (gloo's collective
itself) is not counted, in any set-up.  Each sample is charged to its *owner*:
the innermost frame of fuzzdist, Hypothesis, torch or this benchmark on the stack (so the standard
library's ``pickle`` or ``select`` is charged to whichever of those called it), or "other".  The
table gives each owner's CPU µs per example in c and in a + b, and c's excess; then the fuzzdist
functions that cost most in c.  This time moves less with the machine's other load than wall time
does, but a GIL holder that is preempted still counts: read the rows as shares, not exact costs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pool_overhead as po

from fuzzdist import RankPool

START_EXAMPLES = 10  # examples of the raw loop's start-up run
OWNERS = ("fuzzdist/", "hypothesis/", "torch/", "bench/")


def owner_of(stack: list[str]) -> tuple[str, str]:
    """(owner, function) of a sample's stack (root first): the innermost frame in one of
    :data:`OWNERS` decides; the owner is its package path down to the module, e.g.
    ``fuzzdist/pool/framing``."""
    for frame in reversed(stack):
        name, _, where = frame.partition(" (")
        path = "/" + where.rsplit(":", 1)[0]  # py-spy shortens paths below sys.path: "torch/nn/..."
        for root in OWNERS:
            at = path.rfind("/" + root)
            if at >= 0:
                module = path[at + 1 :].removesuffix(".py").removesuffix("/__init__")
                if root == "fuzzdist/":
                    return module, f"{module}.{name}"
                return root.rstrip("/"), f"{module}.{name}"
    return "other", stack[-1].partition(" (")[0] if stack else "?"


def parse_raw(path: Path) -> tuple[collections.Counter, collections.Counter]:
    """py-spy's raw (collapsed) output -> samples per owner, and per fuzzdist function."""
    owners: collections.Counter = collections.Counter()
    functions: collections.Counter = collections.Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack_text, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack_text.split(";")
        if frames and frames[0].startswith("process "):
            frames = frames[1:]
        frames = [f for f in frames if not f.startswith("thread ")]
        owner, function = owner_of(frames)
        owners[owner] += int(count)
        if owner.startswith("fuzzdist"):
            functions[function] += int(count)
    return owners, functions


def sampled(py_spy: str, rate: int, work: Callable[[], int]) -> tuple[collections.Counter, collections.Counter, int]:
    """Run ``work`` (it returns its number of examples) under py-spy attached to this process and its
    children; (µs of CPU per example per owner, the same per fuzzdist function, examples)."""
    out = Path(tempfile.mkdtemp(prefix="fuzzdist-spy-")) / "raw.txt"
    spy = subprocess.Popen(
        [py_spy, "record", "--pid", str(os.getpid()), "--subprocesses", "--gil", "--rate", str(rate)]
        + ["--format", "raw", "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # py-spy attaches
    try:
        n = work()
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    owners, functions = parse_raw(out)
    shutil.rmtree(out.parent, ignore_errors=True)
    scale = 1e6 / rate / n  # samples -> µs per example
    return (
        collections.Counter({k: v * scale for k, v in owners.items()}),
        collections.Counter({k: v * scale for k, v in functions.items()}),
        n,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1000, help="examples per set-up and round")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; medians are reported")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=8, help="fuzzdist functions listed")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        sys.exit("example_profile.py: py-spy is needed: pip install py-spy")

    ws = 2
    tmpdir = tempfile.mkdtemp(prefix="fuzzdist-bench-")
    pool = RankPool(ws, timeout=60).start()
    rounds: dict[str, list[collections.Counter]] = {"a": [], "b": [], "c": []}
    c_functions: list[collections.Counter] = []
    try:
        po.measure_c(pool, 50)  # warm-up: the ranks' first imports
        _, examples = po.measure_a(args.examples, ws)

        def arm_a() -> int:
            po.measure_a(args.examples, ws)
            return args.examples

        def arm_b() -> int:
            po.measure_b(examples, tmpdir, ws)
            return len(examples)

        def arm_b_start() -> int:  # the raw loop's start-up (spawn, import torch), subtracted from b
            po.measure_b(examples[:START_EXAMPLES], tmpdir, ws)
            return START_EXAMPLES

        def arm_c() -> int:
            po.measure_c(pool, args.examples)
            return args.examples

        arms = {"a": arm_a, "b": arm_b, "c": arm_c}
        for round_ in range(args.rounds):
            order = "abc" if round_ % 2 == 0 else "cba"
            for name in order:
                owners, functions, n = sampled(py_spy, args.rate, arms[name])
                if name == "b":  # (S(n) - S(start)) / (n - start): the loop without its processes' start-up
                    start, _, m = sampled(py_spy, args.rate, arm_b_start)
                    owners = collections.Counter(
                        {k: max(0.0, (v * n - start.get(k, 0.0) * m) / (n - m)) for k, v in owners.items()}
                    )
                rounds[name].append(owners)
                if name == "c":
                    c_functions.append(functions)
            line = ", ".join(f"{k}={sum(rounds[k][-1].values()):.0f}" for k in "abc")
            print(f"round {round_ + 1}: GIL-holding us per example {line}", file=sys.stderr)
    finally:
        pool.close()

    def median_of(counters: list[collections.Counter]) -> dict[str, float]:
        keys = set().union(*counters)
        return {k: statistics.median(c.get(k, 0.0) for c in counters) for k in keys}

    a, b, c = (median_of(rounds[k]) for k in "abc")
    baseline = {k: a.get(k, 0.0) + b.get(k, 0.0) for k in set(a) | set(b)}
    owners = sorted(set(c) | set(baseline), key=lambda k: -(c.get(k, 0.0) - baseline.get(k, 0.0)))
    rounds_text = f"median of {args.rounds} rounds, {args.examples} examples"
    print(f"\nGIL-holding µs per example, driver and ranks together ({rounds_text})")
    print(f"{'owner':<36} {'c':>8} {'a+b':>8} {'c-(a+b)':>8}")
    for k in owners:
        print(f"{k:<36} {c.get(k, 0):>8.0f} {baseline.get(k, 0):>8.0f} {c.get(k, 0) - baseline.get(k, 0):>8.0f}")
    total_c, total_ab = sum(c.values()), sum(baseline.values())
    ratio = total_c / total_ab
    print(f"{'all':<36} {total_c:>8.0f} {total_ab:>8.0f} {total_c - total_ab:>8.0f}   c/(a+b) = {ratio:.2f}")
    functions = median_of(c_functions)
    print(f"\nfuzzdist functions in c, µs per example (top {args.top}):")
    for name, us in sorted(functions.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {us:>7.0f}  {name}")
    if args.json:
        figures = {"a": a, "b": b, "c": c, "c_fuzzdist_functions": functions, "examples": args.examples}
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
