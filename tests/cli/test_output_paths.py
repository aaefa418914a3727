"""Output paths: checked before anything runs (one line, exit 2); a write that fails at the end is one line,
and the summary, the other outputs and the exit code stay right."""

from __future__ import annotations

import json
import types

import pytest
from helpers.cli_helpers import write

from fuzzdist.cli import main

PROPERTY = """
from hypothesis import given, strategies as st

@given(n=st.integers())
def test_prop(n):
    pass
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "properties").mkdir()
    write(tmp_path / "properties", "test_props.py", PROPERTY)
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_line_error(capsys, argv, *expected):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.endswith("\n") and err.count("\n") == 1, err
    for text in expected:
        assert text in err, err
    return err


@pytest.mark.parametrize("flag", ["--report", "--html", "--junit"])
def test_a_folder_as_an_output_is_refused_before_the_run(project, capsys, flag):
    _one_line_error(
        capsys,
        ["run", "--max-examples", "1", flag, "out"],
        "can't write out (it is a folder: name a file in it)",
        f"pass {flag} with",
    )


@pytest.mark.parametrize("flag", ["--report", "--html", "--junit"])
def test_an_output_in_a_missing_folder_is_refused_before_the_run(project, capsys, flag):
    _one_line_error(
        capsys,
        ["run", "--max-examples", "1", flag, "no/such/x"],
        "can't write no/such/x (the folder no/such does not exist)",
        f"pass {flag} with",
    )


def test_two_outputs_naming_one_file_are_refused(project, capsys):
    _one_line_error(
        capsys,
        ["run", "--report", "out/x", "--html", "./out/x"],
        "--report and --html both name out/x",
        "give them different files",
    )


class _Session:
    """Stands in for check-pg's ConformanceSession: no group is built, the verdict is ``conforms``."""

    conforms = True
    checks: list[str] = []

    def __init__(self, factory, **kwargs):
        self.report = types.SimpleNamespace(
            conforms=self.conforms, summary=lambda: "the summary", to_json=lambda: {}, interrupted="", ops={}
        )

    def prepare(self):
        pass

    def close(self):
        pass


def test_check_pg_json_path_is_checked_before_the_check_runs(project, capsys, monkeypatch):
    import fuzzdist.conformance

    monkeypatch.setattr(fuzzdist.conformance, "ConformanceSession", lambda *a, **k: pytest.fail("it ran"))
    _one_line_error(
        capsys,
        ["check-pg", "m:f", "--json", "no/such/x.json"],
        "can't write no/such/x.json (the folder no/such does not exist)",
        "--json",
    )


@pytest.mark.parametrize("conforms, code", [(True, 0), (False, 1)])
def test_check_pg_json_that_fails_at_the_end_keeps_the_verdict(project, capsys, monkeypatch, conforms, code):
    import fuzzdist.campaign.output
    import fuzzdist.conformance

    monkeypatch.setattr(fuzzdist.conformance, "ConformanceSession", type("S", (_Session,), {"conforms": conforms}))

    def fail(path, text):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(fuzzdist.campaign.output, "write_output", fail)
    assert main(["check-pg", "m:f", "--json", "out/x.json"]) == code
    out, err = capsys.readouterr()
    assert "the summary" in out
    assert err == (
        "fuzzdist check-pg: can't write --json out/x.json (Permission denied); the summary above is the whole report\n"
    )


def test_a_junit_file_that_fails_at_the_end_leaves_the_summary_report_and_exit_code_right(project, capsys, monkeypatch):
    import fuzzdist.campaign.output

    real = fuzzdist.campaign.output.write_output

    def junit_fails(path, text):
        if str(path).endswith(".xml"):
            raise PermissionError(13, "Permission denied")
        real(path, text)

    monkeypatch.setattr(fuzzdist.campaign.output, "write_output", junit_fails)
    code = main(
        [
            "run",
            "--max-examples",
            "3",
            "--report",
            "out/r.json",
            "--junit",
            "out/j.xml",
            "--progress",
            "none",
            "--database",
            ":memory:",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert "JUnit XML:   out/j.xml NOT WRITTEN (Permission denied)" in out + err
    assert "fuzzdist campaign finished" in out + err
    assert json.loads((project / "out" / "r.json").read_text())["status"] == "finished"
    assert not (project / "out" / "j.xml").exists()


def test_junit_is_written_through_no_planted_link(project, capsys, tmp_path):
    """The old JUnit writer's temporary name was predictable (``.NAME.PID.tmp`` in the target folder) and
    pytest wrote through a link planted there."""
    import os

    victim = tmp_path / "victim"
    victim.write_text("precious")
    (project / "out" / f".j.xml.{os.getpid()}.tmp").symlink_to(victim)
    # a module name of its own: the other in-process run imported test_props already
    (project / "properties" / "test_props.py").rename(project / "properties" / "test_linked.py")
    code = main(
        [
            "run",
            "--max-examples",
            "3",
            "--report",
            "",
            "--junit",
            "out/j.xml",
            "--progress",
            "none",
            "--database",
            ":memory:",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert victim.read_text() == "precious"
    assert "<testsuite" in (project / "out" / "j.xml").read_text()


def test_a_report_with_a_240_character_name_is_written(project, capsys):
    """The file system takes the name: neither the check before the run nor the writer refuses it."""
    name = "r" * 235 + ".json"
    # a module name of its own: another in-process run imported test_props already
    (project / "properties" / "test_props.py").rename(project / "properties" / "test_long_report.py")
    code = main(
        [
            "run",
            "--max-examples",
            "3",
            "--report",
            f"out/{name}",
            "--junit",
            "",
            "--html",
            "",
            "--progress",
            "none",
            "--database",
            ":memory:",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert json.loads((project / "out" / name).read_text())["status"] == "finished"
