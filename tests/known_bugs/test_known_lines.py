"""Every writer of a KNOWN line shows the entry's kind the same way: the pytest plugin's and
``fuzzdist run``'s (``Tally.lines``), a ``--jobs`` campaign's merged report (``KnownFromReport``),
and check-pg's summary.  A sighting of a "missing validation" entry reads differently from one of a
wrong result, whichever command printed it."""

from __future__ import annotations

from fuzzdist.campaign.merge import KnownFromReport
from fuzzdist.conformance._report import ConformanceReport, OpReport
from fuzzdist.known_bugs import KnownBug, Tally

BUG = KnownBug(
    id="test-only-lines",
    summary="a planted misuse",
    where=("planted",),
    recognise=lambda example, failure: True,
    seen_on=("2.13",),
    kind="missing validation",
    upstream="https://example.invalid/1",
)


def _tally() -> Tally:
    tally = Tally()
    tally.add(BUG, {"n": 1}, RuntimeError("boom"))
    return tally


def test_the_tally_line_is_the_reference():
    assert _tally().lines()[0] == (
        "KNOWN test-only-lines x1 [missing validation]: a planted misuse (https://example.invalid/1)"
    )


def test_a_merged_campaign_report_shows_the_kind_as_the_tally_does():
    tally = _tally()
    assert KnownFromReport(tally.as_json()).lines() == tally.lines()


def test_a_merged_report_from_before_kinds_has_no_empty_brackets():
    old = {k: v for k, v in _tally().as_json()[0].items() if k != "kind"}
    assert KnownFromReport([old]).lines()[0] == (
        "KNOWN test-only-lines x1: a planted misuse (https://example.invalid/1)"
    )


def _check_pg_summary(**extra: str) -> str:
    known = [{**_tally().as_json()[0], **extra}]
    report = ConformanceReport(
        "planted:factory", (2,), backend="gloo", ops={"allreduce": OpReport("allreduce", status="known", known=known)}
    )
    return report.summary()


def test_check_pg_shows_the_kind_as_the_tally_does():
    [line] = [li.strip() for li in _check_pg_summary().splitlines() if li.strip().startswith("KNOWN")]
    assert line == _tally().lines()[0]


def test_check_pg_shows_the_kind_after_what_it_was_inherited_from():
    summary = _check_pg_summary(inherited_from="gloo")
    assert (
        "KNOWN test-only-lines x1 (inherited from gloo: gloo itself gives the same result) "
        "[missing validation]: a planted misuse"
    ) in summary
