"""A failure's example shows what the test drew with ``st.data()`` and what it ``note()``d, wherever the
example is shown: the summary, the JSON report's ``example`` and the HTML page; its ``event()``s stay out."""

from __future__ import annotations

import html
from types import SimpleNamespace

from helpers.cli_helpers import read_report, run_cli, write
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from fuzzdist.campaign.failures import example_text
from fuzzdist.compat import hypothesis_internals as hc

DRAWS = """
from hypothesis import event, given, note, strategies as st

def check(ctx, n):
    if n >= 3:
        raise ValueError(f"planted: n={n}")

@given(data=st.data(), op=st.sampled_from(["sum", "max"]))
def test_draws(rank_pool, data, op):
    n = data.draw(st.integers(0, 10), label="n")
    placement = data.draw(st.sampled_from(["Shard(0)", "Replicate()"]))
    note(f"the shape chosen: ({n}, 2) on {placement}")
    event("secret-event-label")
    rank_pool.run(check, n)
"""


def test_draws_and_notes_are_shown_in_the_summary_the_json_and_the_html(tmp_path):
    write(tmp_path, "test_draws.py", DRAWS)
    result = run_cli(
        [
            "run",
            "test_draws.py",
            "--max-examples",
            "200",
            "--world-size",
            "1",
            "--report",
            "r.json",
            "--html",
            "r.html",
            "--junit",
            "",
            "--database",
            "db",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    [failure] = read_report(tmp_path / "r.json")["properties"][0]["failures"]
    assert failure["shrunk"], failure
    shown = ["Draw 1 (n): 3", "Draw 2: 'Shard(0)'", "the shape chosen: (3, 2) on Shard(0)"]
    example = failure["example"]
    assert all(any(line.startswith(want) for line in example.splitlines()) for want in shown), example
    assert "secret-event-label" not in example and "reproduce_failure" not in example, example
    summary = result.stdout[result.stdout.index("minimal example:") :]
    assert all(f"\n        {line}" in summary for line in shown), summary
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert all(html.escape(line) in page for line in shown)


def test_printed_example_keeps_draws_and_notes_and_stops_at_what_hypothesis_adds():
    notes = [
        "a note the exception had before",
        "Failing test case: test_x(\n    data=data(...),\n    op=0,\n)",
        "Draw 1 (n): 3",
        "Draw 2: []",
        "my note 3",
        "Explanation:\n    These lines were always ...",
        "\nYou can reproduce this test case by temporarily adding @reproduce_failure('6.1', b'AA') as ...",
        "Highest target score: 3  (label='x')",
    ]
    assert hc.printed_example(notes) == (
        "test_x(\n    data=data(...),\n    op=0,\n)\nDraw 1 (n): 3\nDraw 2: []\nmy note 3"
    )
    replayed = [
        "Trying example: test_x(\n    data=data(...),\n)",
        "Draw 1: 5",
        "noted 5",
        "Failed to reproduce exception. Expected: ...",
    ]
    assert hc.printed_example(replayed, attempts=True) == "test_x(\n    data=data(...),\n)\nDraw 1: 5\nnoted 5"


def test_an_example_shown_before_it_is_shrunk_has_its_draws():
    """A failure whose shrinking the time budget cut short: Hypothesis printed nothing yet."""
    shown = []
    item = SimpleNamespace(name="test_x", originalname="test_x")

    @settings(database=None, max_examples=1)
    @given(data=st.data(), op=st.just("sum"))
    def test_x(data, op):
        kwargs = {"data": data, "op": op, "rank_pool": "not drawn"}
        hc.record_draws(kwargs)  # as the campaign's per-example wrapper does
        data.draw(st.just(7), label="n")
        data.draw(st.just([1, 2]))
        note("not shown: Hypothesis reports notes of the final example only")
        event("not shown either")
        shown.append(example_text(item, kwargs, {"data", "op"}))

    test_x()
    assert shown == ["test_x(data=data(...), op='sum')\nDraw 1 (n): 7\nDraw 2: [1, 2]"]
