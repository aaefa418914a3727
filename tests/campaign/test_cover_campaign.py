"""``fuzzdist run --cover``: the lines a campaign's ranks reached, in the JSON report, the HTML page and the
summary; bad package names are one line and exit 2; ``fuzzdist report`` merges several reports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import covered_pkg
from helpers.cli_helpers import read_report, run_cli, write

from fuzzdist.campaign import coverage_report

PROPERTY = """
from hypothesis import given, strategies as st
from covered_pkg import paths

def on_rank(ctx, value):
    return paths.classify(ctx.rank, value)

@given(value=st.integers(0, 5))
def test_classify(rank_pool, value):
    rank_pool.run(on_rank, value)
"""


def marked(source: Path, *who: str) -> set[int]:
    found = set()
    for number, line in enumerate(source.read_text().splitlines(), 1):
        if "# reached: " in line and set(line.split("# reached: ")[1].split()) & set(who):
            found.add(number)
    return found


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """One campaign at 3 ranks with --cover covered_pkg, and its report."""
    tmp = tmp_path_factory.mktemp("cover")
    shutil.copytree(Path(covered_pkg.__file__).parent, tmp / "covered_pkg")
    write(tmp, "test_cov.py", PROPERTY)
    result = run_cli(
        [
            "run",
            "test_cov.py",
            "--max-examples",
            "8",
            "--world-size",
            "3",
            "--cover",
            "covered_pkg",
            "--report",
            "r.json",
            "--html",
            "r.html",
            "--junit",
            "",
        ],
        cwd=tmp,
    )
    return tmp, result


def test_the_report_holds_exactly_the_lines_the_ranks_reached(campaign):
    tmp, result = campaign
    assert result.returncode == 0, result.stdout + result.stderr
    section = read_report(tmp / "r.json")["coverage"]
    source = tmp / "covered_pkg" / "paths.py"
    want = marked(source, "all", "rank0", "rank1", "rank2")
    executable = len(marked(source, "all", "rank0", "rank1", "rank2", "never"))
    assert section["packages"] == ["covered_pkg"]
    assert coverage_report.parse_ranges(section["files"]["covered_pkg/paths.py"]["reached"]) == want
    assert section["files"]["covered_pkg/paths.py"]["executable"] == executable
    assert section["lines_reached"] == len(want) and section["executable_lines"] == executable
    (nodeid,) = section["properties"]
    assert nodeid.startswith("test_cov.py::test_classify")
    assert section["properties"][nodeid]["lines_reached"] == len(want)
    assert section["timeline"][-1][1] == len(want)
    assert f"code reached on the ranks (covered_pkg): {len(want)} of {executable} executable lines" in result.stdout
    assert "Code reached on the ranks" in (tmp / "r.html").read_text()


def test_report_merges_several_reports_coverage(campaign, tmp_path):
    tmp, _ = campaign
    data = read_report(tmp / "r.json")
    other = json.loads(json.dumps(data))
    other["coverage"]["files"]["covered_pkg/paths.py"]["reached"] = "23"  # the never-reached `unused` body
    (tmp_path / "a.json").write_text(json.dumps(data))
    (tmp_path / "b.json").write_text(json.dumps(other))
    result = run_cli(["report", "a.json", "b.json", "--json", "m.json", "--html", "m.html"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    merged = read_report(tmp_path / "m.json")
    assert merged["coverage"]["merged_from"] == 2
    assert merged["coverage"]["lines_reached"] == data["coverage"]["lines_reached"] + 1
    assert merged["totals"]["examples"] == 2 * data["totals"]["examples"]


@pytest.mark.parametrize(
    ("package", "says"),
    [
        ("no_such_package_xyz", "--cover no_such_package_xyz: it doesn't import here (ModuleNotFoundError"),
        ("torch._C", "--cover torch._C: it has no Python source to measure"),
        ("test_cov.py", "--cover test_cov.py: that is a target, not a package"),
    ],
)
def test_a_package_that_cannot_be_measured_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, package, says):
    from fuzzdist.cli import main

    write(tmp_path, "test_cov.py", PROPERTY)
    monkeypatch.chdir(tmp_path)  # the command's own main, in this process: refused before anything starts
    code = main(["run", "test_cov.py", "--max-examples", "1", "--cover", package])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert says in err
    assert len(err.strip().splitlines()) == 1 and out == "", (out, err)
    assert not (tmp_path / "fuzzdist-report.json").exists()  # nothing ran


def test_jobs_workers_measure_and_the_parent_unites_their_sections():
    import argparse

    from fuzzdist.campaign.jobs import worker_argv
    from fuzzdist.campaign.merge import merge_reports

    args = argparse.Namespace(
        targets=[],
        schedule="adaptive",
        duration=None,
        max_examples=5,
        seed=None,
        device="cpu",
        database=None,
        world_size=None,
        timeout=None,
        cover="torch.distributed",
    )
    assert worker_argv(args, 0, 2, "w0.json", "w0.xml")[-2:] == ["--cover", "torch.distributed"]

    def section(reached: str) -> dict:
        return {
            "packages": ["pkg"],
            "mechanism": "settrace",
            "properties": {},
            "files": {"pkg/a.py": {"reached": reached, "lines": 0, "executable": 8}},
            "timeline": [],
        }

    reports = [{"properties": [], "coverage": section("1-3")}, None, {"properties": [], "coverage": section("3-4")}]
    merged = merge_reports({"status": "finished"}, reports, [])
    assert merged["coverage"]["files"]["pkg/a.py"] == {"reached": "1-4", "lines": 4, "executable": 8}
    assert merged["coverage"]["merged_from"] == 2
    assert "coverage" not in merge_reports({}, [{"properties": []}], [])


def test_sigterm_keeps_the_coverage(tmp_path):
    import signal

    from helpers.cli_helpers import finish, start_cli, wait_for_report

    shutil.copytree(Path(covered_pkg.__file__).parent, tmp_path / "covered_pkg")
    write(tmp_path, "test_cov.py", PROPERTY.replace("st.integers(0, 5)", "st.integers(0, 10**9)"))
    proc = start_cli(
        [
            "run",
            "test_cov.py",
            "--duration",
            "300s",
            "--world-size",
            "2",
            "--cover",
            "covered_pkg",
            "--report",
            "r.json",
            "--junit",
            "",
        ],
        cwd=tmp_path,
    )
    try:
        wait_for_report(tmp_path / "r.json", lambda r: (r.get("coverage") or {}).get("lines_reached", 0) > 0, proc=proc)
        proc.send_signal(signal.SIGTERM)
        result = finish(proc, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = read_report(tmp_path / "r.json")
    assert report["status"] == "interrupted" and report["interrupted_by"] == "SIGTERM"
    want = marked(tmp_path / "covered_pkg" / "paths.py", "all", "rank0", "rank1")
    assert coverage_report.parse_ranges(report["coverage"]["files"]["covered_pkg/paths.py"]["reached"]) == want
    assert "code reached on the ranks (covered_pkg)" in result.stdout
