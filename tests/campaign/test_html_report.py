"""The HTML report without a browser: the bounded time series, the event pairs, the page made from a
hand-written JSON report (sections, never-reached cells, escaping) and ``fuzzdist report``'s bad input."""

from __future__ import annotations

import json
import re
import sys

import pytest

from fuzzdist.campaign.html_report import (
    BadReport,
    check_report,
    event_values,
    failure_steps,
    rates,
    render_page,
)
from fuzzdist.campaign.series import EventPairs, TimeSeries, split_event
from fuzzdist.cli import main

EVIL = "<script>alert('x')</script>"


# -- the time series ------------------------------------------------------------------------


def test_series_keeps_a_sample_per_interval_and_always_the_latest():
    series = TimeSeries(interval=1.0, max_points=10)
    for t in (0.0, 0.4, 1.0, 1.5, 2.2, 2.3):
        series.add(t, t * 10)
    assert [s[0] for s in series.samples()] == [0.0, 1.0, 2.2, 2.3]  # 0.4 and 1.5 were too close
    assert series.to_dict(("t_s", "examples")) == {
        "interval_s": 1.0,
        "t_s": [0.0, 1.0, 2.2, 2.3],
        "examples": [0.0, 10.0, 22.0, 23.0],
    }


def test_a_long_series_is_downsampled_evenly_and_stays_bounded():
    series = TimeSeries(interval=1.0, max_points=50)
    sizes = []
    for t in range(100_000):  # a night at one sample a second
        series.add(float(t), t)
        sizes.append(len(series.samples()))
    samples = series.samples()
    assert max(sizes) <= 51  # max_points, and the latest on top
    assert len(samples) >= 25  # halving leaves at least half
    times = [s[0] for s in samples]
    assert times[0] == 0.0 and times[-1] == 99_999.0  # the whole run: its start and where it is now
    gaps = {b - a for a, b in zip(times[:-2], times[1:-1], strict=True)}  # the latest may come early
    assert gaps == {series.interval}, gaps  # evenly spread
    assert series.interval == 2**11  # doubled each time it filled: 100,000 s / 2048 s = 48.8 samples
    assert all(s[1] == s[0] for s in samples)  # each sample kept whole


def test_series_arguments_are_checked():
    with pytest.raises(ValueError, match="max_points >= 2"):
        TimeSeries(max_points=1)
    with pytest.raises(ValueError, match="interval > 0"):
        TimeSeries(interval=0)


# -- the event pairs ------------------------------------------------------------------------


def test_event_labels_split_into_key_and_value():
    assert split_event("dtype=float32") == ("dtype", "float32")
    assert split_event("allocator=expandable_segments:True,x=1") == ("allocator", "expandable_segments:True,x=1")
    assert split_event("fuzzdist:world_size", 2) == ("fuzzdist:world_size", "2")
    assert split_event("known torch bug: gloo-x") is None and split_event("=x") is None


def test_event_pairs_count_examples_per_pair_of_values_up_to_a_bound():
    pairs = EventPairs(max_cells=3)
    pairs.add_example({"layout": {"sliced"}, "dtype": {"int8"}})
    pairs.add_example({"dtype": {"int8", "bool"}, "layout": {"sliced"}})  # two specs in one example
    assert pairs.to_list() == [{"x": "dtype", "y": "layout", "cells": [["bool", "sliced", 1], ["int8", "sliced", 2]]}]
    pairs.add_example({"dtype": {"float32"}, "layout": {"sliced"}, "ndim": {"1"}})  # 3 new pairs, 1 cell left
    assert pairs.cells == 3 and pairs.dropped == 2
    pairs.add_example({"dtype": {"int8"}, "layout": {"sliced"}})  # a known cell still counts
    assert ["int8", "sliced", 3] in pairs.to_list()[0]["cells"]


# -- what the page computes -----------------------------------------------------------------


def test_rates_and_failure_steps():
    assert rates([0.0, 2.0, 2.0, 4.0], [0, 10, 10, 30]) == [(2.0, 5.0), (4.0, 10.0)]  # a zero-length step skipped
    steps = failure_steps([{"found_after_s": 7.0}, {"found_after_s": 3.0}], start=1.0, end=9.0)
    assert steps == [(1.0, 0.0), (3.0, 0.0), (3.0, 1.0), (7.0, 1.0), (7.0, 2.0), (9.0, 2.0)]
    assert failure_steps([], start=2.0, end=5.0) == [(2.0, 0.0), (5.0, 0.0)]
    values, loose = event_values({"dtype=int8": 3, "dtype=bool": 1, "known torch bug: x": 2})
    assert values == {"dtype": {"int8": 3, "bool": 1}} and loose == [("known torch bug: x", 2)]


def _report(**changes) -> dict:
    """A hand-written JSON report: one failing property (user text with markup everywhere), one passing."""
    failing = {
        "nodeid": f"test_x.py::test_{EVIL}[cpu-w2]",
        "status": "failed",
        "examples": 40,
        "invalid_examples": 1,
        "examples_per_s": 20.0,
        "elapsed_s": 2.0,
        "rounds": 2,
        "stop_reason": "max examples",
        "reason": None,
        "distinct_failures": 1,
        "failures": [
            {
                "origin": f"ValueError at {EVIL}",
                "kind": "failure",
                "summary": f"ValueError: {EVIL}",
                "example": f"test_x(s='{EVIL}')",
                "traceback": f"Traceback ...\nValueError: {EVIL}",
                "reproduce_failure": None,
                "reproduce": f"pytest 'test_x.py::test_{EVIL}[cpu-w2]'",
                "found_after_examples": 5,
                "found_after_s": 1.5,
                "from_database": False,
                "shrunk": True,
                "occurrences": 9,
                "hang": None,
            }
        ],
        "events": {
            "dtype=float32": 30,
            "dtype=int8": 10,
            "layout=contiguous": 25,
            "layout=transposed": 15,
            f"{EVIL}=1": 2,
            "known torch bug: gloo-x": 1,
        },
        "event_pairs": [
            {
                "x": "dtype",
                "y": "layout",
                "cells": [["float32", "contiguous", 20], ["float32", "transposed", 10], ["int8", "contiguous", 5]],
            }
        ],
        "event_pairs_dropped": 0,
        "series": {
            "interval_s": 1.0,
            "t_s": [1.0, 2.0, 3.0],
            "examples": [0, 25, 40],
            "invalid_examples": [0, 1, 1],
            "distinct_failures": [0, 1, 1],
        },
    }
    passing = {
        "nodeid": "test_y.py::test_ok[cpu-w2]",
        "status": "passed",
        "examples": 100,
        "examples_per_s": 50.0,
        "elapsed_s": 2.0,
        "failures": [],
        "distinct_failures": 0,
        "events": {},
    }  # an older report's
    report = {
        "format": 1,
        "fuzzdist_version": "0.1.0",
        "status": "finished",
        "command": ["fuzzdist", "run", EVIL],
        "started": "2026-01-01T00:00:00+00:00",
        "elapsed_s": 5.0,
        "budget": {"duration_s": 5.0},
        "totals": {"properties": 2, "examples": 140, "distinct_failures": 1, "failing_properties": 1},
        "properties": [failing, passing],
    }
    report.update(changes)
    return report


def test_the_page_has_every_section_and_shows_the_pairs_never_reached():
    page = render_page(_report())
    for anchor in ('id="summary"', 'id="timeline"', 'id="prop-0"', 'id="prop-1"'):
        assert anchor in page
    assert page.count('class="failure ') == 1 and page.count('class="pair-grid"') == 1
    assert page.count("<svg") == 2  # the failures timeline; the failing property's throughput (the other has none)
    assert "No time series in this report" in page  # the report without one still renders
    grid = page[page.index('class="pair-grid"') :]
    assert "1 of 4 pairs never reached" in grid
    assert re.search(r'<td class="never" title="dtype=int8 with layout=transposed: never reached">', grid), grid[:2000]
    assert "1 of 4" in page[: page.index('id="timeline"')]  # the summary table counts it too
    assert 'http-equiv="refresh"' not in page  # finished: nothing to follow


@pytest.mark.parametrize("known", [False, True])
def test_user_text_is_escaped_everywhere_and_nothing_is_fetched(known):
    page = render_page(_known_report() if known else _report())
    assert "<script" not in page.lower()  # pygal's own config script is removed too
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page  # shown as text
    links = re.findall(r"<a [^>]*>", page)  # a link is followed only when clicked: the upstream issues
    assert all(
        re.fullmatch(r'<a href="(#[^"]*|https://github\.com/pytorch/pytorch/issues/\d+)"( rel="noreferrer")?>', a)
        for a in links
    ), links
    fetched = re.sub(r"<a [^>]*>", "", page)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", fetched, re.I)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page, re.I)
    assert "@import" not in page
    assert not re.search(r"""href\s*=\s*["']?\s*javascript:""", page, re.I)  # a bad upstream stays text


KNOWN_BUG = {
    "id": "gloo-x-wrong",
    "count": 7,
    "summary": f"gloo's x writes the wrong elements {EVIL}",
    "upstream": "https://github.com/pytorch/pytorch/issues/123",
    "reproducer": "docs/findings/gloo-x-wrong.py",
    "example": f"shape=(2, 3), note='{EVIL}'",
    "failure": f"RankError: rank 1: got 8 {EVIL}",
}


def _known_report() -> dict:
    """A campaign whose only sightings are known torch bugs: one property KNOWN, the other passed."""
    report = _report()
    failing, passing = report["properties"]
    other = dict(KNOWN_BUG, id="nn-y-grad", count=2, upstream="javascript:alert(1)", reproducer=None)
    failing.update(status="known", failures=[], distinct_failures=0, known_sightings=9, known_bugs=[KNOWN_BUG, other])
    report["totals"].update(
        distinct_failures=0,
        failing_properties=0,
        known_sightings=9,
        known_bugs=["gloo-x-wrong", "nn-y-grad"],
        properties_with_known_bugs=1,
    )
    return report


def test_known_sightings_are_shown_apart_from_failures():
    page = render_page(_known_report())
    summary = page[: page.index('id="known"')]
    assert '<p class="headline known">' in summary and 'class="good"' not in summary  # not green, not failed
    assert (
        "0 distinct failure(s) in 0 of 2 properties; 9 sighting(s) of 2 known torch bug(s) in 1 properties" in summary
    )
    row = re.search(r'<tr class="status-known">.*?</tr>', summary).group(0)
    assert '<td class="n known">9</td>' in row  # the known column
    assert "<th>known</th>" in summary
    assert all(r.count("<td") == 8 for r in re.findall(r'<tr class="status-[a-z]+">.*?</tr>', summary))
    known = page[page.index('id="known"') : page.index('id="timeline"')]
    assert known.count('class="known-bug"') == 2
    for text in (
        "gloo-x-wrong",
        "&times;7",
        "gloo&#x27;s x writes the wrong elements &lt;script&gt;",
        '<a href="https://github.com/pytorch/pytorch/issues/123" rel="noreferrer">',
        "python docs/findings/gloo-x-wrong.py",
        "shape=(2, 3), note=&#x27;&lt;script&gt;",
        "RankError: rank 1: got 8",
        "test_x.py::test_",
    ):
        assert text in known, text
    assert "upstream: javascript:alert(1)</li>" in known  # shown, not linked
    prop = page[page.index('id="prop-0"') : page.index('id="prop-1"')]
    assert "None found." not in prop and "None found apart from the known torch bugs below." in prop
    assert "9 sighting(s) of known torch bugs" in prop and prop.count('class="known-bug"') == 2
    assert '<span class="status status-known">known</span>' in prop
    assert ".status-known{" in page and "tr.status-known td{" in page  # styled


def test_a_report_without_known_bugs_has_no_known_section_and_replays_are_not_called_known():
    report = _report()
    report["properties"][0]["failures"][0]["from_database"] = True
    page = render_page(report)
    assert 'id="known"' not in page and 'class="known-bug"' not in page and "sighting" not in page
    assert '<p class="headline bad">' in page
    assert "(replayed from the database: found by an earlier run)" in page and "(known:" not in page


def test_a_running_campaigns_page_reloads_itself():
    assert 'http-equiv="refresh"' in render_page(_report(status="running"))


def test_reports_fuzzdist_can_not_read_are_refused():
    with pytest.raises(BadReport, match="not a fuzzdist campaign report"):
        check_report({"results": []})
    with pytest.raises(BadReport, match="newer than this fuzzdist reads"):
        check_report(_report(format=99))
    assert check_report(_report())["status"] == "finished"


# -- fuzzdist report ------------------------------------------------------------------------


def test_fuzzdist_report_writes_the_page(tmp_path, capsys):
    (tmp_path / "r.json").write_text(json.dumps(_report(status="running")), encoding="utf-8")
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")]) == 0
    assert 'id="prop-1"' in (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "HTML report:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "can't read .*r.json \\(No such file or directory\\): pass the JSON report"),
        ("{not json", "r.json is not JSON .*: pass the JSON report fuzzdist run wrote"),
        ('{"a": 1}', "r.json: it is not a fuzzdist campaign report"),
    ],
)
def test_fuzzdist_report_bad_input_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    if content is not None:
        (tmp_path / "r.json").write_text(content, encoding="utf-8")
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fuzzdist report: error: "), err
    assert re.search(message, err), err
    assert not (tmp_path / "r.html").exists()


def test_fuzzdist_report_needs_html_and_a_writable_place(tmp_path, capsys):
    (tmp_path / "r.json").write_text(json.dumps(_report()), encoding="utf-8")
    assert main(["report", str(tmp_path / "r.json")]) == 2
    assert "the following arguments are required: --html" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "no" / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass --html with a path in a writable directory" in err, err


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "properties").mkdir()
    (tmp_path / "properties" / "test_p.py").write_text("def test_p():\n    pass\n", encoding="utf-8")
    (tmp_path / "r.json").write_text(json.dumps(_report()), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("argv", [["run", "--html", "r.html"], ["report", "r.json", "--html", "r.html"]])
def test_without_pygal_html_fails_early_saying_what_to_install(project, capsys, monkeypatch, argv):
    monkeypatch.setitem(sys.modules, "pygal", None)  # what find_spec sees when it is not installed
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install pygal" in err, err
    assert not (project / "r.html").exists()


def test_fuzzdist_run_html_that_cant_be_written(project, capsys):
    assert main(["run", "--html", "no_dir/r.html"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "can't write no_dir/r.html" in err and "--html" in err, err


def test_fuzzdist_run_says_when_the_page_could_not_be_written(project, capsys, monkeypatch):
    def broken(report):
        raise ValueError("planted: no page")

    (project / "properties" / "test_p.py").write_text(
        "from hypothesis import given, strategies as st\n\n@given(st.integers())\ndef test_p(n):\n    pass\n",
        encoding="utf-8",
    )
    monkeypatch.setattr("fuzzdist.campaign.html_report.render_page", broken)
    assert (
        main(
            [
                "run",
                "--max-examples",
                "2",
                "--report",
                "r.json",
                "--html",
                "r.html",
                "--junit",
                "",
                "--progress",
                "none",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "HTML report: r.html NOT WRITTEN (ValueError: planted: no page)" in out, out
    assert "JSON report: r.json\n" in out and not (project / "r.html").exists()


def test_a_chart_whose_secondary_series_has_no_point_yet_is_drawn():
    """Early in a campaign a right-hand series (failures, events) can be empty: pygal can't scale an
    axis with no point, so the page must still be written, with the series that have points."""
    from fuzzdist.campaign.charts import xy_chart

    svg = xy_chart(
        "examples",
        [("prop", [(0.0, 1.0), (1.0, 5.0)])],
        x_title="s",
        y_title="examples",
        secondary=[("failures", [])],
        secondary_title="failures",
    )
    assert svg.startswith("<svg") and "prop" in svg and "failures (failures)" not in svg
