"""bench/time_to_find.py: its figures, its planting, and one tiny run that must find its planted bug."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import _planted_campaign as planting  # noqa: E402
import time_to_find as ttf  # noqa: E402


def _report(*props: tuple[str, list[dict], int]) -> dict:
    """A campaign report with just what the benchmark reads of each property."""
    entries = [{"nodeid": nodeid, "failures": failures, "examples": examples} for nodeid, failures, examples in props]
    return dict(properties=entries)


def test_family_figures_take_the_family_s_own_fresh_failures():
    report = _report(
        (
            "properties/test_broadcast.py::test_b[cpu-w2]",
            [
                {"found_after_s": 12.0, "shrunk": True, "shrunk_after_s": 15.5},
                {"found_after_s": 3.0, "shrunk": False, "from_database": True},
            ],
            40,
        ),  # a replay: not a find
        ("properties/test_ddp_parity.py::test_d[cpu-w2]", [{"found_after_s": 1.0, "shrunk": True}], 9),
    )
    assert ttf.family_figures(report, ("test_broadcast.py",)) == (12.0, 15.5, 40)
    assert ttf.family_figures(report, ("test_zero.py",)) == (None, None, 0)


def test_summary_counts_a_miss_as_the_duration_and_names_the_worst_family():
    def found(family, first, shrunk):
        return ttf.Found(family, first, shrunk, load=2.0, wall_s=100.0, examples=1)

    lines = ttf.summarise(
        {
            "a": [found("a", 10, 12), found("a", 20, 25), found("a", 30, 31)],
            "b": [found("b", None, None), found("b", None, None), found("b", 50, 55)],
            "c": [found("c", 40, None), found("c", 41, 60), found("c", 42, 70)],
        }
    )
    assert lines[1].split()[:4] == ["a", "20.0", "25.0", "3/3"]
    assert lines[2].split()[:4] == ["b", ">100.0", ">100.0", "1/3"]  # two misses: at least the wall time
    assert lines[3].split()[:4] == ["c", "41.0", "70.0", "3/3"]  # one shrink missing, above the median
    assert "worst family b: first 100.0 s" in lines[-1]


def test_every_plant_names_a_real_check_keyword_and_stand_in():
    import inspect

    sys.path.insert(0, str(ROOT / "tests"))
    for plant in planting.PLANTS.values():
        module = __import__(f"fuzzdist.properties.{plant.module}", fromlist=["check"])
        params = inspect.signature(module.check).parameters
        assert plant.keyword in params or any(p.kind is p.VAR_KEYWORD for p in params.values()), plant
        assert planting.stand_in(plant) is not None


def test_install_passes_the_stand_in_unless_the_caller_gives_one(monkeypatch):
    from fuzzdist.properties import broadcast

    seen = []
    monkeypatch.setattr(broadcast, "check", lambda pool, *args, **kwargs: seen.append(kwargs))
    planting.install(planting.PLANTS["broadcast"])
    broadcast.check(None, "spec", 0, 0)
    broadcast.check(None, "spec", 0, 0, broadcast=print)
    assert seen[0]["broadcast"].__name__ == "broadcast_corrupting_large" and seen[1]["broadcast"] is print


@pytest.mark.timeout(600)
def test_a_tiny_run_finds_the_planted_broadcast_bug():
    result = subprocess.run(
        [
            sys.executable,
            "bench/time_to_find.py",
            "--family",
            "broadcast",
            "--duration",
            "40",
            "--rounds",
            "1",
            "--jobs",
            "1",
            "properties/test_broadcast.py",
        ],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=580,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("broadcast "))
    first, shrunk, found = row.split()[1:4]
    assert found == "1/1" and not first.startswith(">"), result.stdout
    assert 0 < float(first) <= float(shrunk) <= 40, result.stdout
    assert "worst family broadcast" in result.stdout
