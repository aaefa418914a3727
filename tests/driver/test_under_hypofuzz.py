"""HypoFuzz (``hypothesis fuzz``) runs a fuzzdist property: its rank pool is set up, examples run on the
ranks, and a known torch bug's sighting passes, as under pytest, instead of failing the property."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hypofuzz")

ROOT = Path(__file__).resolve().parents[2]

# HypoFuzz's own collection and fuzz target (what `hypothesis fuzz` runs in each worker), for a few
# seconds on the broadcast property at 2 CPU ranks, which draws transposed tensors (the known bug
# gloo-broadcast-ignores-strides) within its first examples.
FUZZ = r"""
import json, sys, time
from hypofuzz import detection
from hypofuzz.collection import collect_tests

def main():
    detection._in_hypofuzz_run = True
    collected = collect_tests((sys.argv[2], "-k", "cpu-w2", "-p", "no:cacheprovider"))
    target = collected.fuzz_targets[0]
    target._enter_fixtures()
    target.run_one()  # the first example: the ranks' first imports, Hypothesis's scan of local constants
    runs, start = 1, time.monotonic()
    try:
        while time.monotonic() - start < float(sys.argv[1]) and not target.has_found_failure:
            target.run_one()
            runs += 1
    finally:
        target._exit_fixtures()
    events = [b for b in target.provider.corpus.behavior_counts if isinstance(b, str)]
    print(json.dumps({"nodeid": target.nodeid, "runs": runs, "failed": target.has_found_failure, "events": events}))

if __name__ == "__main__":  # the ranks are spawned: they import this module again
    main()
"""


def test_hypofuzz_runs_a_property_on_the_ranks_and_a_known_bug_passes(tmp_path):
    script = tmp_path / "fuzz.py"
    script.write_text(FUZZ)
    result = subprocess.run(
        [sys.executable, str(script), "10", str(ROOT / "properties/test_broadcast.py")],
        cwd=tmp_path,  # HypoFuzz's database (.hypothesis/) goes here
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["nodeid"] == "properties/test_broadcast.py::test_broadcast_reaches_every_rank[cpu-w2]"
    assert report["runs"] >= 20, report
    assert not report["failed"], result.stderr[-3000:]
    assert any("gloo-broadcast-ignores-strides" in event for event in report["events"]), report["events"]
