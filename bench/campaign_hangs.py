"""A property whose failures are hangs: campaign throughput, and how long shrinking each hang takes.

Run:  python bench/campaign_hangs.py [--duration 5m] [--rounds 3] [--only campaign|shrink] [--configs spawn,default]
          [--json FILE]

The property runs ``_rank_fns.two_hangs(a, b)`` on 3 CPU ranks with a 20 s per-example timeout, a, b
drawn from 0-50: a collective mismatch for a >= 6, a skipped collective for b >= 4 (so most examples
hang).  Two configurations, alternating which goes first from round to round:

  spawn    every rank a new interpreter, no spare set (FUZZDIST_START_METHOD=spawn FUZZDIST_SPARES=never:
           how pools started before the fork server and spares)
  default  the pool's defaults: ranks forked from the fork server, a spare set from the first restart on

and two measurements:

  campaign  ``fuzzdist run FILE --duration D``: examples per second over the property's time (from the
            JSON report: examples / the property's elapsed seconds), and its distinct failures.
  shrink    in one interpreter, Hypothesis (report_multiple_bugs, no database) finds and shrinks both
            hangs to their minimal examples (a=6, b=0 and a=0, b=4): the wall time from the first
            example to the end, and the examples it ran.

Prints the medians over the rounds and default/spawn.  The machine's load shifts both; compare the
configurations within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROPERTY = """
import sys
sys.path.insert(0, {bench!r})
import pytest
from hypothesis import given, strategies as st
import _rank_fns


@pytest.mark.fuzzdist(world_size=3, timeout=20)
@given(a=st.integers(0, 50), b=st.integers(0, 50))
def test_two_hangs(rank_pool, a, b):
    rank_pool.run(_rank_fns.two_hangs, a, b)
"""
CONFIGS = ("spawn", "default")


def _env(config: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FUZZDIST_START_METHOD", None)
    env.pop("FUZZDIST_SPARES", None)
    if config == "spawn":
        env["FUZZDIST_START_METHOD"] = "spawn"
        env["FUZZDIST_SPARES"] = "never"
    return env


def campaign(config: str, duration: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="fuzzdist-bench-") as tmp:
        prop = Path(tmp) / "test_two_hangs.py"
        prop.write_text(PROPERTY.format(bench=str(HERE)))
        report = Path(tmp) / "report.json"
        cmd = [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            str(prop),
            "--duration",
            duration,
            "--report",
            str(report),
            "--database",
            str(Path(tmp) / "db"),
            "--progress",
            "none",
        ]
        subprocess.run(cmd, env=_env(config), cwd=tmp, capture_output=True, text=True, timeout=3600)
        data = json.loads(report.read_text())
    prop_report = data["properties"][0]
    return {
        "examples": prop_report["examples"],
        "elapsed_s": prop_report["elapsed_s"],
        "examples_per_s": prop_report["examples"] / max(prop_report["elapsed_s"], 1e-9),
        "failures": prop_report["distinct_failures"],
    }


def shrink_once() -> dict:
    """In this interpreter: find and shrink both hangs; seconds and examples."""
    sys.path.insert(0, str(HERE))
    import _rank_fns
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    from fuzzdist import RankPool

    pool = RankPool(3, timeout=20).start()  # FUZZDIST_START_METHOD and FUZZDIST_SPARES from _env
    count = [0]

    @settings(
        max_examples=300,
        database=None,
        deadline=None,
        report_multiple_bugs=True,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(a=st.integers(0, 50), b=st.integers(0, 50))
    def prop(a, b):
        count[0] += 1
        pool.run(_rank_fns.two_hangs, a, b)

    started = time.perf_counter()
    try:
        prop()
    except BaseException as e:  # noqa: BLE001 - the two hangs, as an exception group
        found = [str(getattr(x, "__notes__", [""])[-1:]) for x in getattr(e, "exceptions", [e])]
    else:
        found = []
    seconds = time.perf_counter() - started
    pool.close()
    return {"seconds": seconds, "examples": count[0], "failures": len(found)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", default="5m")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("campaign", "shrink"))
    parser.add_argument("--configs", default=",".join(CONFIGS), help="which of spawn,default to run")
    parser.add_argument("--json")
    parser.add_argument("--shrink-once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.shrink_once:
        print(json.dumps(shrink_once()))
        return
    configs = tuple(c for c in CONFIGS if c in args.configs.split(","))
    results: dict = {c: {"campaign": [], "shrink": []} for c in CONFIGS}
    for r in range(args.rounds):
        for config in configs if r % 2 == 0 else configs[::-1]:
            if args.only in (None, "shrink"):
                out = subprocess.run(
                    [sys.executable, __file__, "--shrink-once"],
                    env=_env(config),
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=3600,
                )
                results[config]["shrink"].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1} {config} shrink: {results[config]['shrink'][-1]}", file=sys.stderr, flush=True)
            if args.only in (None, "campaign"):
                results[config]["campaign"].append(campaign(config, args.duration))
                print(
                    f"round {r + 1} {config} campaign: {results[config]['campaign'][-1]}", file=sys.stderr, flush=True
                )
    for config in CONFIGS:
        c, s = results[config]["campaign"], results[config]["shrink"]
        line = f"{config:<8}"
        if c:
            line += (
                f"  campaign {statistics.median(x['examples_per_s'] for x in c):7.2f} examples/s "
                f"(failures {[x['failures'] for x in c]})"
            )
        if s:
            line += (
                f"  find+shrink both hangs {statistics.median(x['seconds'] for x in s):6.1f} s "
                f"({statistics.median(x['examples'] for x in s):.0f} examples, "
                f"failures {[x['failures'] for x in s]})"
            )
        print(line)
    if results["spawn"]["campaign"] and results["default"]["campaign"]:
        ratio = statistics.median(x["examples_per_s"] for x in results["default"]["campaign"]) / statistics.median(
            x["examples_per_s"] for x in results["spawn"]["campaign"]
        )
        print(f"default/spawn campaign throughput: {ratio:.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
