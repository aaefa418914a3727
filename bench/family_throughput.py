"""Examples per second of the training-loop property families at 2 ranks.

Run (from the repository root):

    python bench/family_throughput.py [--examples 100] [--rounds 3] [--family zero,join,...] [--json FILE]

For each family (zero, join, comm_hooks, checkpoint, tensor_parallel, pipelining, sharded_tensor, fsdp1, reshard),
one child process runs ``pytest properties/test_<family>.py -k w2`` (every test of the family at
world size 2, on CPU ranks over gloo) under the ``campaign`` profile with ``max_examples=N``, a
fresh example database and a fixed ``--hypothesis-seed``, and reports, test by test, the examples
Hypothesis ran (its statistics: passing and failing, every phase) over the seconds of the test's
call phase: the rank pool's start-up (the fixture's set-up) is excluded, the ranks' first imports
of the family's torch modules are not.  A known torch bug's sightings are examples like any other.
The family's figure is its tests' examples over their seconds, together.  A test that fails is
measured too (its examples include the failure's shrinking) and marked "failed"; a failing test
whose statistics Hypothesis did not record is listed with no figure.  With ``--rounds R`` the
families run R times, in the same order each round, and the figures are the medians of the rounds.
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
FAMILIES = (
    "zero",
    "join",
    "comm_hooks",
    "checkpoint",
    "tensor_parallel",
    "pipelining",
    "sharded_tensor",
    "fsdp1",
    "reshard",
)
SEED = 20261126  # every run draws the same examples
TARGET = 2.0  # examples per second, the floor a family is held to


def _child(family: str, n: int, tmp: Path) -> int:
    """In a child process: the family's 2-rank tests under the campaign profile with max_examples=n;
    writes {nodeid: {"examples", "seconds"}} to tmp/result.json."""
    import pytest
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    from fuzzdist.driver import profiles

    profiles.register()
    settings.register_profile(
        "family-bench",
        settings(
            parent=settings.get_profile("campaign"),
            max_examples=n,
            database=DirectoryBasedExampleDatabase(str(tmp / "db")),
        ),
    )

    class Measure:
        def __init__(self) -> None:
            self.rows: dict[str, dict[str, float]] = {}

        def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
            if report.when == "call":
                row = self.rows.setdefault(report.nodeid, {})
                row["seconds"] = report.duration
                row["outcome"] = report.outcome

        @pytest.hookimpl(trylast=True)
        def pytest_runtest_teardown(self, item: pytest.Item) -> None:
            stats = getattr(item, "hypothesis_statistics", "")
            counts = re.findall(r"(\d+) passing, (\d+) failing", stats)
            self.rows.setdefault(item.nodeid, {})["examples"] = sum(int(p) + int(f) for p, f in counts)

    measure = Measure()
    code = pytest.main(
        [
            f"properties/test_{family}.py",
            "-k",
            "w2",
            "-q",
            "-p",
            "no:cacheprovider",
            "--hypothesis-profile=family-bench",
            "-o",
            "timeout=0",
            f"--hypothesis-seed={SEED}",
        ],
        plugins=[measure],
    )
    (tmp / "result.json").write_text(json.dumps({"code": int(code), "tests": measure.rows}))
    return 0


def run_family(family: str, n: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="fuzzdist-bench-") as tmp:
        start = time.monotonic()
        result = subprocess.run(
            [sys.executable, __file__, "--_child", family, str(n), tmp], cwd=ROOT, text=True, capture_output=True
        )
        wall = time.monotonic() - start
        out = Path(tmp) / "result.json"
        if result.returncode != 0 or not out.exists():
            raise SystemExit(
                f"{family}: the pytest run failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        measured = json.loads(out.read_text())
    if measured["code"] not in (0,) and not measured["tests"]:
        raise SystemExit(f"{family}: pytest exited {measured['code']} with no test measured:\n{result.stdout}")
    tests = {nodeid: row for nodeid, row in measured["tests"].items() if "seconds" in row and row.get("examples")}
    unmeasured = sorted(nodeid for nodeid, row in measured["tests"].items() if nodeid not in tests)
    examples = sum(row["examples"] for row in tests.values())
    seconds = sum(row["seconds"] for row in tests.values())
    return {
        "family": family,
        "code": measured["code"],
        "wall_s": wall,
        "tests": tests,
        "unmeasured": unmeasured,
        "examples": examples,
        "seconds": seconds,
        "per_s": examples / seconds if seconds else 0.0,
        "summary": result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "",
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_child":
        return _child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="max_examples per test (default 100)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; medians (default 1)")
    parser.add_argument("--family", default=",".join(FAMILIES), help="comma-separated families (default: all 9)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args()
    families = [f for f in args.family.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    rounds: dict[str, list[dict]] = {f: [] for f in families}
    for i in range(args.rounds):
        for family in families:
            row = run_family(family, args.examples)
            rounds[family].append(row)
            print(
                f"round {i + 1} {family:>16}: {row['examples']:5d} examples in {row['seconds']:7.2f}s = "
                f"{row['per_s']:6.1f}/s  (load {os.getloadavg()[0]:.1f}; pytest: {row['summary']})",
                flush=True,
            )
            for nodeid, test in sorted(row["tests"].items()):
                failed = "  (failed)" if test.get("outcome") == "failed" else ""
                print(
                    f"      {nodeid.split('::', 1)[1]:<60} {test['examples']:5d} in {test['seconds']:7.2f}s = "
                    f"{test['examples'] / test['seconds']:6.1f}/s{failed}",
                    flush=True,
                )
            for nodeid in row["unmeasured"]:
                print(f"      {nodeid.split('::', 1)[1]:<60} failed, no statistics recorded", flush=True)
    print(f"\nexamples per second at 2 ranks, max_examples={args.examples} per test, median of {args.rounds} round(s):")
    medians = {}
    for family in families:
        medians[family] = statistics.median(r["per_s"] for r in rounds[family])
        slowest = min(
            statistics.median(
                r["tests"][t]["examples"] / r["tests"][t]["seconds"] for r in rounds[family] if t in r["tests"]
            )
            for t in rounds[family][0]["tests"]
        )
        flag = "" if medians[family] >= TARGET and slowest >= TARGET else f"   BELOW {TARGET:g}/s"
        print(f"  {family:<16} {medians[family]:7.1f}/s   (slowest test {slowest:.1f}/s){flag}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"examples": args.examples, "rounds": rounds, "medians": medians}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
