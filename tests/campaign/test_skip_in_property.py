"""A ``pytest.skip()`` inside a ``@given`` property is a skip in the campaign, not a pass with no example."""

from __future__ import annotations

import json

from helpers.cli_helpers import write

from fuzzdist.cli import main

PROPERTY = """
import pytest
from hypothesis import given, strategies as st

@given(n=st.integers())
def test_skips_inside(n):
    pytest.skip("not on this machine")
"""


def test_pytest_skip_inside_a_given_is_reported_as_skipped(tmp_path, monkeypatch, capsys):
    (tmp_path / "properties").mkdir()
    write(tmp_path / "properties", "test_skips_inside.py", PROPERTY)
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "run",
                "--max-examples",
                "5",
                "--report",
                "r.json",
                "--junit",
                "",
                "--progress",
                "none",
                "--database",
                ":memory:",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    [prop] = json.loads((tmp_path / "r.json").read_text())["properties"]
    assert (prop["status"], prop["reason"], prop["examples"]) == ("skipped", "not on this machine", 0)
    assert "skipped" in out and "not on this machine" in out


FIXTURE_FAILS = """
import pytest
from hypothesis import given, strategies as st

@pytest.fixture
def broken():
    x = 1
    raise ValueError("planted: the fixture's set-up fails")

@given(n=st.integers())
def test_setup_fails(broken, n):
    pass
"""


def test_a_failed_setup_is_reported_by_its_error_line_not_its_source(tmp_path, monkeypatch, capsys):
    (tmp_path / "properties").mkdir()
    write(tmp_path / "properties", "test_setup_fails.py", FIXTURE_FAILS)
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "run",
                "--max-examples",
                "5",
                "--report",
                "r.json",
                "--junit",
                "",
                "--progress",
                "none",
                "--database",
                ":memory:",
            ]
        )
        == 1
    )
    capsys.readouterr()
    [prop] = json.loads((tmp_path / "r.json").read_text())["properties"]
    assert prop["status"] == "error"
    assert prop["reason"] == "setup failed: ValueError: planted: the fixture's set-up fails", prop["reason"]
