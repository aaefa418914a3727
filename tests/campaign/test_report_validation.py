"""``fuzzdist report`` trusts nothing in its JSON: a malformed report is one line and exit 2, every value on
the page is escaped, and a page with nothing to plot still says so in words."""

from __future__ import annotations

import copy
import json
import re

import pytest

from fuzzdist.campaign.html_report import check_report, render_page
from fuzzdist.cli import main

EVIL = '<img src=x onerror="alert(1)">'


def _report() -> dict:
    prop = {
        "nodeid": "test_x.py::test_a",
        "status": "failed",
        "examples": 4,
        "invalid_examples": 0,
        "examples_per_s": 2.0,
        "elapsed_s": 2.0,
        "rounds": 1,
        "distinct_failures": 1,
        "failures": [
            {
                "origin": "o",
                "kind": "failure",
                "summary": "s",
                "example": "e",
                "reproduce": "r",
                "found_after_examples": 1,
                "found_after_s": 0.5,
                "occurrences": 1,
                "hang": None,
            }
        ],
        "events": {"dtype=int8": 3},
        "event_pairs": [{"x": "dtype", "y": "layout", "cells": [["int8", "contiguous", 3]]}],
        "series": {"t_s": [1.0, 2.0], "examples": [1, 4]},
        "known_bugs": [],
    }
    return {
        "format": 1,
        "status": "finished",
        "command": ["fuzzdist", "run"],
        "elapsed_s": 2.0,
        "budget": {"duration_s": 2.0},
        "totals": {"properties": 1, "examples": 4, "distinct_failures": 1, "failing_properties": 1},
        "properties": [prop],
    }


def _set(path: str, value):
    """A copy of the report with the field at ``path`` (dots; [i] for list items) set to ``value``."""
    report = copy.deepcopy(_report())
    *parents, last = re.findall(r"[^.\[\]]+", path)
    node = report
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return report


MALFORMED = [
    (_set("totals", "x"), "totals should be an object"),
    (_set("totals.examples", "many"), "totals.examples should be a whole number"),
    (_set("budget", []), "budget should be an object"),
    (_set("budget.duration_s", "5s"), "budget.duration_s should be a number"),
    (_set("command", "fuzzdist run"), "command should be a list"),
    (_set("elapsed_s", float("nan")), "elapsed_s should be a number"),
    (_set("properties.0", "test_x"), r"properties\[0\] should be an object"),
    (_set("properties.0.examples", None), r"properties\[0\].examples should be a number"),
    (_set("properties.0.examples_per_s", "fast"), r"properties\[0\].examples_per_s should be a number"),
    (_set("properties.0.failures", {"a": 1}), r"properties\[0\].failures should be a list"),
    (_set("properties.0.failures.0", 7), r"properties\[0\].failures\[0\] should be an object"),
    (_set("properties.0.failures.0.found_after_s", "soon"), r"failures\[0\].found_after_s should be a number"),
    (_set("properties.0.failures.0.hang", {"ranks": [1]}), r"failures\[0\].hang.ranks should be an object"),
    (_set("properties.0.events", ["dtype=int8"]), r"properties\[0\].events should be an object"),
    (_set("properties.0.events", {"dtype=int8": "3"}), r"events\['dtype=int8'\] should be a whole number"),
    (_set("properties.0.event_pairs.0.cells", [["int8", ["x"], 3]]), r"cells\[0\] should be a \[value, value"),
    (_set("properties.0.event_pairs.0", {"x": "a"}), None),  # no y: the pair is left out, the page is made
    (_set("properties.0.series.t_s", ["a", "b"]), r"series.t_s should be a list of numbers"),
    (_set("properties.0.known_bugs", [{"count": "2"}]), r"known_bugs\[0\].count should be a whole number"),
    (_set("properties.0.rounds", True), r"rounds should be a whole number"),
    (_set("properties.0.distinct_failures", EVIL), r"distinct_failures should be a whole number"),
]


@pytest.mark.parametrize("report, message", MALFORMED)
def test_a_malformed_report_is_one_line_and_exit_2(tmp_path, capsys, report, message):
    (tmp_path / "r.json").write_text(json.dumps(report), encoding="utf-8")
    code = main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])
    out, err = capsys.readouterr()
    if message is None:
        assert code == 0, err
        return
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("fuzzdist report: error: "), err
    assert re.search(message, err), err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("content", ['{"format": 1, "properties": [' * 2000, "1" * 5000, "[1, 2"])
def test_json_python_refuses_to_read_is_one_line(tmp_path, capsys, content):
    (tmp_path / "r.json").write_text(content, encoding="utf-8")
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not JSON" in err, err


def test_the_page_is_not_written_over_the_report_it_reads(tmp_path, capsys):
    (tmp_path / "r.json").write_text(json.dumps(_report()), encoding="utf-8")
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.json")]) == 2
    assert "is the report read" in capsys.readouterr().err
    assert json.loads((tmp_path / "r.json").read_text()) == _report()


def test_every_value_is_escaped_even_where_a_number_is_expected():
    """render_page on its own (past check_report): the fields that were printed raw are escaped too."""
    report = _set("properties.0.distinct_failures", EVIL)
    report["properties"][0]["rounds"] = EVIL
    page = render_page(report)
    assert EVIL not in page and "<img" not in page


# -- nothing to plot ---------------------------------------------------------------------------


@pytest.mark.parametrize("statuses", [[], ["pending", "pending"], ["skipped", "skipped"]])
def test_a_page_with_nothing_to_plot_says_so_in_words(tmp_path, capsys, statuses):
    """No property started yet, or every one skipped: the page is written, the charts say why they are empty."""
    report = _report()
    report["properties"] = [
        {"nodeid": f"test_x.py::test_{i}", "status": status, "examples": 0, "failures": [], "events": {}}
        for i, status in enumerate(statuses)
    ]
    page = render_page(check_report(report))
    assert "Distinct failures over time: nothing to plot yet" in page or "no property has run" in page
    (tmp_path / "r.json").write_text(json.dumps(report), encoding="utf-8")
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")]) == 0, capsys.readouterr()


def test_the_failures_chart_of_many_properties_keeps_its_axis_title_and_a_legend_in_columns():
    report = _report()
    report["properties"] = [
        dict(_report()["properties"][0], nodeid=f"properties/test_family_{i}.py::test_some_long_property_name_{i}")
        for i in range(36)
    ]
    page = render_page(check_report(report))
    timeline = page[page.index('id="timeline"') : page.index('id="prop-0"')]
    titles = re.findall(r"<text[^>]*rotate\(-90[^>]*>(.*?)</text>", timeline)
    assert titles == ["distinct failures"], titles  # one piece, not broken letter by letter


def test_a_chart_of_properties_without_failures_plots_only_those_with_some():
    report = _report()
    quiet = dict(report["properties"][0], nodeid="test_x.py::test_quiet", failures=[], distinct_failures=0)
    report["properties"].append(quiet)
    page = render_page(check_report(report))
    timeline = page[page.index('id="timeline"') : page.index('id="prop-0"')]
    assert "test_x.py::test_a" in timeline and "test_quiet" not in timeline
    assert "1 other propert" in timeline


# -- values nothing can show, and what a few bytes can ask the page to draw --------------------

NOT_FINITE = [
    ("properties.0.targets", {"loss": float("inf")}, r"properties\[0\].targets.loss should be a finite number"),
    ("properties.0.startup_s", float("nan"), r"properties\[0\].startup_s should be a finite number"),
    (
        "coverage",
        {"files": {}, "percent": float("-inf"), "lines_reached": 1},
        r"coverage.percent should be a finite number",
    ),
    ("coverage", {"files": {}, "timeline": [[float("inf"), 3]]}, r"coverage.timeline\[0\]\[0\] should be a finite"),
]


@pytest.mark.parametrize("field, value, message", NOT_FINITE)
@pytest.mark.parametrize("merged", [False, True], ids=["one", "merged"])
def test_infinity_or_nan_anywhere_is_one_line_and_exit_2(tmp_path, capsys, field, value, message, merged):
    """Python's json reads Infinity and NaN; the page (pygal, the coverage section) and the merge can't use them."""
    text = json.dumps(_set(field, value))
    assert "Infinity" in text or "NaN" in text
    (tmp_path / "bad.json").write_text(text, encoding="utf-8")
    (tmp_path / "good.json").write_text(json.dumps(_report()), encoding="utf-8")
    paths = [str(tmp_path / "good.json")] * merged + [str(tmp_path / "bad.json")]
    code = main(["report", *paths, "--html", str(tmp_path / "r.html")])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("fuzzdist report: error: "), err
    assert re.search(message, err), err
    assert not (tmp_path / "r.html").exists()


def test_a_lone_surrogate_is_shown_escaped_and_the_page_is_written(tmp_path, capsys):
    """What Python makes of a non-UTF-8 byte (a database path `db\\xff`): JSON keeps it as \\udcff, UTF-8 can't."""
    report = _set("properties.0.failures.0.example", "test_a(path='db\udcff')")
    report["database"] = "db\udcff"
    report["properties"][0]["nodeid"] = "test_x.py::test_\udcff"
    (tmp_path / "r.json").write_text(json.dumps(report), encoding="ascii")
    assert main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")]) == 0, capsys.readouterr()
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "test_a(path=&#x27;db\\udcff&#x27;)" in page and "test_x.py::test_\\udcff" in page


def test_the_pair_grids_drawn_are_bounded_and_those_left_out_are_named(tmp_path, capsys):
    """100 pairs of 40 values each (78 KB of JSON) asked for 160,000 cells, an 11 MB page."""
    from fuzzdist.campaign.html_report import MAX_GRID_CELLS

    report = _report()
    report["properties"][0]["event_pairs"] = [
        {"x": f"a{i}", "y": f"b{i}", "cells": [[f"v{j}", f"w{j}", 1] for j in range(40)]} for i in range(100)
    ]
    page = render_page(check_report(report))
    drawn = page.count('<div class="pair-grid">')
    assert drawn == MAX_GRID_CELLS // 1600
    assert page.count('class="never"') <= MAX_GRID_CELLS
    assert f"{100 - drawn} more pair(s) of events not drawn" in page
    assert len(page) < 2_000_000


def test_the_page_draws_at_most_its_share_of_grid_cells_over_all_properties():
    from fuzzdist.campaign.html_report import MAX_PAGE_GRID_CELLS

    report = _report()
    prop = report["properties"][0]
    prop["event_pairs"] = [
        {"x": f"a{i}", "y": f"b{i}", "cells": [[f"v{j}", f"w{j}", 1] for j in range(40)]} for i in range(6)
    ]
    report["properties"] = [dict(prop, nodeid=f"test_x.py::test_{i}") for i in range(20)]
    page = render_page(check_report(report))
    assert page.count('class="never"') <= MAX_PAGE_GRID_CELLS
    assert "more pair(s) of events not drawn" in page


def test_a_long_event_value_is_cut_in_the_grids():
    from fuzzdist.campaign.html_report import MAX_VALUE_CHARS

    report = _report()
    long = "x" * 10_000
    report["properties"][0]["event_pairs"][0]["cells"] = [[long, "contiguous", 3]]
    page = render_page(check_report(report))
    assert "x" * (MAX_VALUE_CHARS - 3) + "..." in page and "x" * (MAX_VALUE_CHARS + 1) not in page
