"""The HTML report in a real headless Chromium: the page of a real ``fuzzdist run --html`` loads with no
console error and fetches nothing, has its sections, and its screenshot is kept as the test's artefact.

Skipped, with the reason, where no Chromium is installed (Debian: ``apt-get install chromium``), unless
``FUZZDIST_REQUIRE_CHROMIUM=1`` (CI sets it and installs Chromium): then they fail.
The screenshot goes to the test's tmp_path and, when ``FUZZDIST_ARTEFACTS`` names a directory, there too.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from helpers.browser import REQUIRE_ENV, chromium_or_skip, load
from helpers.cli_helpers import finish, read_report, start_cli, wait_for_report, write

from fuzzdist.cli import main


@pytest.fixture
def chromium() -> str:
    return chromium_or_skip()


# A planted bug (whose message carries markup) and a passing property, both drawing tensor specs
# so the coverage has event pairs.
PROPERTIES = """
from hypothesis import given, strategies as st
from fuzzdist import strategies as fst

def check(ctx, spec, n):
    if n >= 3:
        raise ValueError(f"planted <script>alert('x')</script> n={n}")

def shape(ctx, spec):
    return spec.shape

@given(spec=fst.tensor_specs(max_bytes=64), n=st.integers(0, 100))
def test_planted(rank_pool, spec, n):
    rank_pool.run(check, spec, n)

@given(spec=fst.tensor_specs(max_bytes=64))
def test_passes(rank_pool, spec):
    rank_pool.run(shape, spec)
"""


def _keep(path: Path) -> None:
    """Copy an artefact to $FUZZDIST_ARTEFACTS, when set."""
    where = os.environ.get("FUZZDIST_ARTEFACTS")
    if where:
        os.makedirs(where, exist_ok=True)
        shutil.copy(path, Path(where) / path.name)


@pytest.mark.parametrize(
    "required, outcome", [(None, pytest.skip.Exception), ("0", pytest.skip.Exception), ("1", pytest.fail.Exception)]
)
def test_without_chromium_the_tests_skip_unless_it_is_required(tmp_path, monkeypatch, required, outcome):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to find there
    if required is None:
        monkeypatch.delenv(REQUIRE_ENV, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_ENV, required)
    with pytest.raises(outcome, match="no chromium binary on PATH"):
        chromium_or_skip()


def test_the_browser_check_sees_console_errors_exceptions_and_fetches(tmp_path, chromium):
    """The detection itself: a page with a console.error, an uncaught exception and a failed fetch."""
    bad = write(
        tmp_path,
        "bad.html",
        "<!DOCTYPE html><html><body><p>x</p><script>console.error('boom');"
        "console.log('just-a-log')</script><script>notDefined()</script>"
        '<img src="http://127.0.0.1:1/missing.png"></body></html>',
    )
    seen = load(bad.as_uri(), chromium)
    errors = "\n".join(seen.errors)
    assert "console.error: boom" in errors and "ReferenceError: notDefined is not defined" in errors, errors
    assert "just-a-log" not in errors  # console.log is no error
    assert any("127.0.0.1:1/missing.png" in e for e in seen.errors), errors
    assert "http://127.0.0.1:1/missing.png" in seen.requests
    assert seen.screenshot.startswith(b"\x89PNG\r\n\x1a\n")
    # A clean page (the campaign's, below) reports no error.


def test_a_campaigns_page_loads_cleanly_in_chromium(tmp_path, chromium):
    write(tmp_path, "test_tiny.py", PROPERTIES)
    proc = start_cli(
        [
            "run",
            "test_tiny.py",
            "--max-examples",
            "60",
            "--world-size",
            "1",
            "--report",
            "r.json",
            "--html",
            "r.html",
            "--junit",
            "",
            "--progress",
            "none",
        ],
        cwd=tmp_path,
    )
    # While it runs, the page is there already, says so, and reloads itself.
    wait_for_report(tmp_path / "r.json", lambda r: r["status"] == "running", proc)
    deadline = time.monotonic() + 30
    while not (tmp_path / "r.html").exists() and time.monotonic() < deadline:  # written right after the JSON
        time.sleep(0.05)
    running = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<title>fuzzdist campaign running</title>" in running and 'http-equiv="refresh"' in running
    result = finish(proc)
    assert result.returncode == 1, result.stdout + result.stderr  # the planted bug
    assert "HTML report: r.html" in result.stdout
    report = read_report(tmp_path / "r.json")
    planted, passing = report["properties"]
    assert planted["series"]["examples"][-1] == planted["examples"]  # the series ends where the property did
    assert any(p["x"] == "dtype" and p["y"] == "layout" for p in passing["event_pairs"])

    page = tmp_path / "r.html"
    seen = load(page.as_uri(), chromium)
    shot = tmp_path / "fuzzdist-report.png"
    shot.write_bytes(seen.screenshot)
    _keep(shot)
    assert seen.errors == [], seen.errors
    assert seen.requests == [page.as_uri()]  # self-contained: nothing else fetched
    facts = seen.facts
    assert {"summary", "timeline", "prop-0", "prop-1"} <= set(facts["ids"])
    counts = facts["counts"]
    assert counts["section.property"] == 2 and counts[".failure"] == 1 and counts["script"] == 0, counts
    assert counts[".pair-grid"] >= 2 and counts[".chart svg"] == 3, counts  # timeline + one per property
    assert "planted <script>alert('x')</script> n=3" in facts["text"]  # shown as text, shrunk
    assert "pytest 'test_tiny.py::test_planted[cpu-w1]'" in facts["text"]
    assert facts["title"] == "fuzzdist campaign finished"
    assert 'http-equiv="refresh"' not in page.read_text(encoding="utf-8")  # nothing more to follow
    assert seen.screenshot.startswith(b"\x89PNG") and facts["height"] > 900

    # `fuzzdist report` makes the same page from the JSON.
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "again.html")]) == 0
    again = (tmp_path / "again.html").read_text(encoding="utf-8")
    assert again.count('class="property"') == 2 and "planted &lt;script&gt;" in again
