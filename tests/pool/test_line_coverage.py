"""``--cover``: the ranks report exactly the lines of a package they ran, merged over ranks, examples and
reports; bad package names are refused with what to do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cover_fns
from helpers.covered_pkg import paths

from fuzzdist import RankError, RankPool
from fuzzdist.campaign import coverage_report
from fuzzdist.errors import InvalidArgument
from fuzzdist.pool import line_coverage
from fuzzdist.pool.rank import line_cover

PATHS = os.path.realpath(paths.__file__)
SHOWN = "covered_pkg/paths.py"  # how the report names it


def marked(*who: str) -> set[int]:
    """The lines of covered_pkg/paths.py marked ``# reached:`` with any of ``who``."""
    found = set()
    for number, line in enumerate(Path(PATHS).read_text().splitlines(), 1):
        match = re.search(r"# reached: (.*)$", line)
        if match and set(match.group(1).split()) & set(who):
            found.add(number)
    return found


@pytest.fixture
def cover():
    ledger = line_coverage.enable(["helpers.covered_pkg"])
    try:
        yield ledger
    finally:
        line_coverage.disable()


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_report_exactly_the_lines_they_ran_merged_across_ranks(cover, world_size):
    line_coverage.set_scope("prop-a")
    with RankPool(world_size, timeout=30) as pool:
        assert pool.run(cover_fns.classify_on_rank, 3)[:2] == ["zero", "one-6"]
        pool.run(cover_fns.classify_on_rank, 4)  # the same lines again: nothing new travels
        want = marked("all", *[f"rank{r}" for r in range(world_size)])
        assert cover.total == {PATHS: want}
        assert cover.by_scope["prop-a"] == {PATHS: want}
        # another property reaching the same lines has them too (the ranks re-arm per scope)
        line_coverage.set_scope("prop-b")
        pool.run(cover_fns.classify_on_rank, 5)
        assert cover.by_scope["prop-b"] == {PATHS: want}
    assert cover.count == len(want)
    section = coverage_report.build_section(cover, cover.started)
    assert coverage_report.parse_ranges(section["files"][SHOWN]["reached"]) == want
    assert section["files"][SHOWN]["executable"] == len(marked("all", "rank0", "rank1", "rank2", "never"))
    assert section["properties"]["prop-a"]["lines_reached"] == len(want)
    assert "covered_pkg/__init__.py" not in section["never_reached"]  # no function: nothing to reach
    assert section["lines_reached"] == len(want)


def test_a_failing_example_s_lines_count_too(cover):
    line_coverage.set_scope("failing")
    with RankPool(2, timeout=30) as pool, pytest.raises(RankError):
        pool.run(cover_fns.classify_then_fail, 1)
    assert cover.by_scope["failing"] == {PATHS: marked("all", "rank0", "rank1")}


def test_coverage_off_sends_nothing():
    assert line_coverage.ledger() is None
    with RankPool(2, timeout=30) as pool:
        pool.run(cover_fns.classify_on_rank, 1)
    assert line_coverage.lines_reached() == 0


# -- the mechanisms, in the rank module alone (no torch: any Python pyenv has) -----------------------

MECHANISM_SCRIPT = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("line_cover", sys.argv[1])
lc = importlib.util.module_from_spec(spec); spec.loader.exec_module(lc)
from covered_pkg import paths
out = {}
for scope, ranks in (("a", [0, 1]), ("a", [2]), ("b", [0])):
    lc.request(((sys.argv[3],), sys.argv[4], scope))
    got = {}
    for rank in ranks:
        lc.begin(); paths.classify(rank, 1); new = lc.end() or {}
        for f, lines in new.items():
            got.setdefault(f, []).extend(lines)
    out.setdefault(scope, []).append(sorted(l for lines in got.values() for l in lines))
print(json.dumps(out))
"""


def _pythons() -> list[tuple[str, str]]:
    here = ["monitoring"] if hasattr(sys, "monitoring") else []
    here += ["ctracer", "settrace"]  # coverage is a test dependency: its C tracer is always here
    found = [(sys.executable, mechanism) for mechanism in here]
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for version in ("3.10", "3.11", "3.12", "3.13"):
        for candidate in sorted(root.glob(f"{version}.*/bin/python")):
            found.append((str(candidate), "settrace"))
            if version >= "3.12":
                found.append((str(candidate), "monitoring"))
            break
    return found


@pytest.mark.parametrize(("python", "mechanism"), _pythons())
def test_each_mechanism_reports_each_line_once_per_scope(python, mechanism):
    helpers = str(Path(cover_fns.__file__).parent)
    result = subprocess.run(
        [python, "-c", MECHANISM_SCRIPT, line_cover.__file__, "", os.path.dirname(PATHS), mechanism],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": helpers},
    )
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    # scope a: ranks 0 and 1, then rank 2 only adds its own lines; scope b starts afresh
    assert got["a"][0] == sorted(marked("all", "rank0", "rank1"))
    assert got["a"][1] == sorted(marked("rank2") - marked("all", "rank0", "rank1"))
    assert got["b"] == [sorted(marked("all", "rank0"))]


def test_the_c_tracer_is_the_fastest_mechanism_before_python_3_12():
    assert line_cover.has_c_tracer()  # coverage is a test dependency
    assert line_cover.best_mechanism() == ("monitoring" if hasattr(sys, "monitoring") else "ctracer")


def test_a_mechanism_can_be_chosen_by_the_environment_and_a_bad_one_is_refused(monkeypatch):
    monkeypatch.setenv(line_coverage.MECHANISM_VARIABLE, "settrace")
    try:
        assert line_coverage.enable(["helpers.covered_pkg"]).mechanism == "settrace"
        monkeypatch.setenv(line_coverage.MECHANISM_VARIABLE, "dtrace")
        with pytest.raises(InvalidArgument, match="use one of monitoring, ctracer, settrace"):
            line_coverage.enable(["helpers.covered_pkg"])
    finally:
        line_coverage.disable()


# -- the section: merging, ranges, executable lines ---------------------------------------------------


def test_executable_lines_are_the_lines_inside_functions():
    assert coverage_report.executable_lines(PATHS) == marked("all", "rank0", "rank1", "rank2", "never")


def test_ranges_round_trip_and_bad_ranges_are_skipped():
    assert coverage_report.ranges([1, 2, 3, 7, 9, 10]) == "1-3,7,9-10"
    assert coverage_report.parse_ranges("1-3,7,9-10") == {1, 2, 3, 7, 9, 10}
    assert coverage_report.parse_ranges("x,5-2,0,4") == {4}
    assert coverage_report.parse_ranges(None) == set()


def _section(reached: str, props: dict, timeline: list) -> dict:
    lines = len(coverage_report.parse_ranges(reached))
    return {
        "packages": ["pkg"],
        "mechanism": "settrace",
        "files": {
            "pkg/a.py": {"reached": reached, "lines": lines, "executable": 10},
            "pkg/b.py": {"reached": "", "lines": 0, "executable": 5},
        },
        "properties": props,
        "timeline": timeline,
    }


def test_sections_merge_by_union():
    one = _section("1-3", {"p": {"files": {"pkg/a.py": "1-2"}, "timeline": [[1.0, 2]]}}, [[1.0, 3]])
    two = _section(
        "3-5",
        {"p": {"files": {"pkg/a.py": "5"}, "timeline": [[2.0, 1]]}, "q": {"files": {"pkg/a.py": "3"}, "timeline": []}},
        [[0.5, 1], [2.0, 3]],
    )
    merged = coverage_report.merge_sections([one, None, two])
    assert merged["files"]["pkg/a.py"] == {"reached": "1-5", "lines": 5, "executable": 10}
    assert merged["lines_reached"] == 5 and merged["executable_lines"] == 15 and merged["percent"] == 33.3
    assert merged["never_reached"] == ["pkg/b.py"]
    assert merged["properties"]["p"]["files"] == {"pkg/a.py": "1-2,5"}
    assert merged["properties"]["p"]["lines_reached"] == 3
    assert merged["timeline"] == [[0.5, 1], [1.0, 3]]
    assert coverage_report.merge_sections([None, {"files": "junk"}]) is None
    line = coverage_report.summary_line(merged)
    assert line is not None and "5 of 15 executable lines (33.3%)" in line and "1 files never reached" in line
    # what the count can't see is said, so a file at 0 is not read as never called
    assert "before its first example" in line and "hung or killed their rank" in line
    assert "killed from outside at their deadline" in line
    assert "pkg/b.py" in coverage_report.html_section(merged)


# -- bad input ---------------------------------------------------------------------------------------


def test_a_package_that_does_not_import_is_refused():
    with pytest.raises(InvalidArgument, match="no_such_package_xyz: it doesn't import here"):
        line_coverage.resolve(["no_such_package_xyz"])


def test_a_c_extension_is_refused_with_the_reason():
    with pytest.raises(InvalidArgument, match="torch._C: it has no Python source .*C extension"):
        line_coverage.resolve(["torch._C"])
    with pytest.raises(InvalidArgument, match="no Python source"):
        line_coverage.resolve(["sys"])


def test_a_module_or_a_package_resolves_to_its_source():
    (target,) = line_coverage.resolve(["helpers.covered_pkg.paths"])
    assert target.root == PATHS and target.base == os.path.dirname(PATHS)
    (target,) = line_coverage.resolve(["helpers.covered_pkg"])
    assert target.root == os.path.dirname(PATHS)
