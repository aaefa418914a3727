"""A campaign's throughput against the same property under plain pytest.

Run (from the repository root):

    python bench/campaign_throughput.py [--examples 1000] [--rounds 3] [--property NODEID] [--json FILE]

Measured in one run, on the same machine, in interleaved rounds (the median
of --rounds), for the broadcast property on 2 CPU ranks by default:

  campaign  ``fuzzdist run NODEID --max-examples N`` (fresh database): examples
            per second of the property's campaign, from the JSON report
            (examples run / seconds in the property, pool start-up excluded)
  pytest    ``pytest NODEID`` under the ``campaign`` profile with
            ``max_examples=N`` (fresh database): examples per second of the
            test's call phase (pool start-up excluded; examples counted from
            Hypothesis's statistics)

and prints both and campaign/pytest: the ratio of the medians, and the median
of each round's ratio (the headline: a round's two runs are adjacent in time,
so load drifting on a shared machine cancels out; target >= 0.9, i.e.
within 10%).  It also
measures, in process and without a pool, the CPU time the campaign's
per-example wrapper adds (the one per-example cost a campaign has that
pytest has not), a figure the machine's load blurs far less.
Both runs get the same example budget, N valid examples, in one Hypothesis
round, and draw the same examples (``fuzzdist run --seed S`` and
``pytest --hypothesis-seed=S``); the difference is the campaign's per-example wrapper (counting,
events, budget checks, progress and report ticks) and its round set-up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROPERTY = "properties/test_broadcast.py::test_broadcast_reaches_every_rank[cpu-w2]"
SEED = 20261122  # both runs draw the same examples: fuzzdist run --seed S / pytest --hypothesis-seed=S


def campaign_round(nodeid: str, n: int, tmp: Path) -> dict:
    report = tmp / "campaign.json"
    start = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            nodeid,
            "--max-examples",
            str(n),
            "--database",
            str(tmp / "campaign-db"),
            "--report",
            str(report),
            "--junit",
            "",
            "--progress",
            "none",
            "--seed",
            str(SEED),
        ],
        cwd=ROOT,
        text=True,
        capture_output=True,
    )
    wall = time.monotonic() - start
    if result.returncode != 0:
        raise SystemExit(f"the campaign failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    [prop] = json.loads(report.read_text())["properties"]
    return {"examples": prop["examples"], "seconds": prop["elapsed_s"], "wall_s": wall}


def pytest_round(nodeid: str, n: int, tmp: Path) -> dict:
    out = tmp / "pytest.json"
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, __file__, "--_pytest", nodeid, str(n), str(tmp)], cwd=ROOT, text=True, capture_output=True
    )
    wall = time.monotonic() - start
    if result.returncode != 0 or not out.exists():
        raise SystemExit(f"the pytest run failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    measured = json.loads(out.read_text())
    return {**measured, "wall_s": wall}


def _pytest_child(nodeid: str, n: int, tmp: Path) -> int:
    """In a child process: pytest NODEID under the campaign profile with max_examples=n."""
    import pytest
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    from fuzzdist.driver import profiles

    profiles.register()
    settings.register_profile(
        "campaign-bench",
        settings(
            parent=settings.get_profile("campaign"),
            max_examples=n,
            database=DirectoryBasedExampleDatabase(str(tmp / "pytest-db")),
        ),
    )

    class Measure:
        seconds = None
        examples = None

        def pytest_runtest_logreport(self, report):
            if report.when == "call":
                self.seconds = report.duration

        @pytest.hookimpl(trylast=True)
        def pytest_runtest_teardown(self, item):
            stats = getattr(item, "hypothesis_statistics", "")
            counts = re.findall(r"(\d+) passing, (\d+) failing", stats)
            self.examples = sum(int(p) + int(f) for p, f in counts)

    measure = Measure()
    code = pytest.main(
        [
            nodeid,
            "-q",
            "-p",
            "no:cacheprovider",
            "--hypothesis-profile=campaign-bench",
            "-o",
            "timeout=0",
            f"--hypothesis-seed={SEED}",
        ],
        plugins=[measure],
    )
    if code != 0:
        return int(code)
    (tmp / "pytest.json").write_text(json.dumps({"examples": measure.examples, "seconds": measure.seconds}))
    return 0


def wrapper_overhead_us(calls: int = 100_000, repeats: int = 7) -> float:
    """CPU microseconds the campaign's per-example wrapper adds to one example: the wrapper around
    a no-op test, minus the no-op, inside a Hypothesis build context with one event() label (the
    min of ``repeats`` timings of ``calls`` calls; a figure machine load blurs far less)."""
    from fuzzdist.campaign.database import Database
    from fuzzdist.campaign.progress import Progress
    from fuzzdist.campaign.report import CampaignState, PropertyState
    from fuzzdist.campaign.rounds import PropertyRun, Round
    from fuzzdist.campaign.runner import CampaignPlugin
    from fuzzdist.campaign.selection import Targets
    from fuzzdist.compat.hypothesis_internals import example_context

    class Item:
        nodeid = name = originalname = "noop"

    def noop(**kwargs):
        return None

    state = CampaignState(command=[], device="cpu", database="-", duration_s=3600.0, max_examples=None, world_size=2)
    devnull = open(os.devnull, "w")  # noqa: SIM115 - the bench's stream lives as long as the process
    plugin = CampaignPlugin(Targets(), state=state, database=Database(None, "-", True), progress=Progress(devnull))
    prop = PropertyState("noop", status="running", started_at=time.monotonic(), share_end=time.monotonic() + 3600)
    state.deadline = prop.share_end
    run = PropertyRun(plugin, Item(), prop)
    run.round, run.given = Round(1, frozenset(), frozenset()), {"x"}
    wrapped = run.wrap(noop)
    best = {}
    with example_context(noop, {"dtype=torch.float32": ""}):
        for _ in range(repeats):
            for name, fn in (("noop", noop), ("wrapped", wrapped)):
                start = time.process_time()
                for _ in range(calls):
                    fn(x=1)
                best[name] = min(best.get(name, float("inf")), time.process_time() - start)
    return (best["wrapped"] - best["noop"]) / calls * 1e6


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_pytest":
        return _pytest_child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="example budget per run (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians (default 3)")
    parser.add_argument("--property", default=PROPERTY, help=f"node id (default {PROPERTY})")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args()
    rows = {"campaign": [], "pytest": []}
    for i in range(args.rounds):
        for name, run in (
            (("campaign", campaign_round), ("pytest", pytest_round))
            if i % 2 == 0
            else (("pytest", pytest_round), ("campaign", campaign_round))
        ):
            with tempfile.TemporaryDirectory(prefix="fuzzdist-bench-") as tmp:
                row = run(args.property, args.examples, Path(tmp))
            row["per_s"] = row["examples"] / row["seconds"]
            rows[name].append(row)
            print(
                f"round {i + 1} {name:>8}: {row['examples']:,} examples in {row['seconds']:.2f}s = "
                f"{row['per_s']:.1f}/s (process wall {row['wall_s']:.1f}s)",
                flush=True,
            )
    overhead = wrapper_overhead_us()
    campaign = statistics.median(r["per_s"] for r in rows["campaign"])
    plain = statistics.median(r["per_s"] for r in rows["pytest"])
    ratio = campaign / plain
    # Each round's two runs are adjacent in time, so their ratio is less exposed to the machine's
    # load drifting during the benchmark than the ratio of the medians.
    paired = statistics.median(c["per_s"] / p["per_s"] for c, p in zip(rows["campaign"], rows["pytest"], strict=False))
    print(f"\n{args.property}, {args.examples:,} examples per run, median of {args.rounds} rounds:")
    print(f"  campaign (fuzzdist run):            {campaign:8.1f} examples/s")
    print(f"  pytest, campaign profile:           {plain:8.1f} examples/s")
    print(f"  campaign / pytest (of the medians): {ratio:8.3f}")
    print(
        f"  campaign / pytest (median of the rounds' ratios): {paired:.3f}   (target >= 0.9: "
        f"{'met' if paired >= 0.9 else 'missed'})"
    )
    print(
        f"  the campaign's wrapper, per example: {overhead:8.1f} us CPU (in-process, no pool; "
        f"{overhead / (1e6 / plain) * 100:.2f}% of a pytest example)"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "property": args.property,
                    "examples": args.examples,
                    "rounds": rows,
                    "campaign_per_s": campaign,
                    "pytest_per_s": plain,
                    "ratio": ratio,
                    "paired_ratio": paired,
                    "wrapper_overhead_us": overhead,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
