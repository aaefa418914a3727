"""Long fuzz campaigns over the property suite, and replay of the failures they stored.

The ``fuzzdist`` command (:mod:`fuzzdist.cli`) drives both through pytest, in
process, with a plugin object from this package:

    runner.py           ``fuzzdist run`` (``CampaignPlugin``): rounds of Hypothesis per property
                        until its share of the budget is spent
    rounds.py           the rounds of one property: the example wrapper, the budget
    schedule.py         how ``--duration`` is split between properties (pure logic)
    failures.py         the distinct failures found, one record per origin
    replay.py           ``fuzzdist replay`` (``ReplayPlugin``): re-executes the stored failures
    export_script.py    ``replay --export-script``: a stored failure as a standalone script
    database.py         directory / Redis example databases, fuzzdist's index
    selection.py        which collected tests a command runs
    jobs.py, merge.py   ``--jobs N``: the worker processes, and the merging of their reports
    default_jobs.py     how many workers ``fuzzdist run`` starts without ``--jobs``
    lifeline.py         a ``--jobs`` worker lives no longer than its parent
    report.py           campaign state, the JSON report, the summary table
    series.py           the bounded time series and event pairs the HTML report plots
    html_report.py      the HTML page, with charts.py's static SVG charts
    coverage_report.py  the report's ``coverage`` section (``--cover``)
    output.py           the one writer of every output file
    progress.py         the live display (rich on a TTY, plain lines otherwise)
    plain_text.py       strings from outside (a database, a report) printed as plain text

This module is also a pytest plugin for ``-p fuzzdist.campaign``: it adds
``--fuzzdist-database=DIR_OR_URL``, which points the loaded Hypothesis
profile at that database, so that plain pytest replays what a campaign
stored in a directory other than Hypothesis's default, or in Redis::

    pytest -p fuzzdist.campaign --fuzzdist-database=redis://db:6379/0 \\
        'properties/test_broadcast.py::test_broadcast_reaches_every_rank[cpu-w2]' \\
        --hypothesis-profile=replay
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fuzzdist", "fuzzdist: property testing of torch.distributed")
    group.addoption(
        "--fuzzdist-database",
        metavar="DIR_OR_URL",
        default=None,
        help="Hypothesis example database for every test: a directory or a redis:// URL",
    )


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    spec = config.getoption("fuzzdist_database", None)
    if not spec:
        return
    from hypothesis import settings

    from fuzzdist.campaign.database import open_database
    from fuzzdist.compat.hypothesis_internals import current_profile_name
    from fuzzdist.errors import DatabaseError

    try:
        database = open_database(spec)
    except DatabaseError as exc:
        raise pytest.UsageError(str(exc)) from None
    name = f"{current_profile_name() or 'default'}+fuzzdist-database"
    settings.register_profile(name, settings(parent=settings.default, database=database.db))
    settings.load_profile(name)
