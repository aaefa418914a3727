"""A ``pytest.skip()`` inside a ``@given`` property is a skip in the campaign, not a pass with no example."""

from __future__ import annotations

import json

from helpers.cli_helpers import write

from fuzzdist.cli import main

PROPERTY = '''
import pytest
from hypothesis import given, strategies as st

@given(n=st.integers())
def test_skips_inside(n):
    pytest.skip("not on this machine")
'''


def test_pytest_skip_inside_a_given_is_reported_as_skipped(tmp_path, monkeypatch, capsys):
    (tmp_path / "properties").mkdir()
    write(tmp_path / "properties", "test_skips_inside.py", PROPERTY)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--max-examples", "5", "--report", "r.json", "--junit", "", "--progress", "none",
                 "--database", ":memory:"]) == 0
    out = capsys.readouterr().out
    [prop] = json.loads((tmp_path / "r.json").read_text())["properties"]
    assert (prop["status"], prop["reason"], prop["examples"]) == ("skipped", "not on this machine", 0)
    assert "skipped" in out and "not on this machine" in out
