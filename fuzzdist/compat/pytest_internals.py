"""Every use of pytest internals in fuzzdist, one small function or name each.

pytest does not promise these (``_pytest`` modules, private attributes of
its items, the end of its own test loop), so they live here alone: a pytest
upgrade that moves one breaks this module, not the campaign runner, replay
or the variant keys.

Checked against pytest 9.2.0 (the version fuzzdist's tests run with); the
same names exist in pytest 7.4, the oldest release pyproject.toml allows.
"""

from __future__ import annotations

from typing import Any

import pytest
from _pytest.outcomes import Failed, OutcomeException

__all__ = [
    "Failed",
    "OutcomeException",
    "call_arguments",
    "end_test_loop",
    "has_parametrized_fixture",
    "run_test_protocol",
]

# ``Failed``: what pytest.fail() raises (``pytest.fail.Exception``), a failure of the test.
# ``OutcomeException``: the base of what pytest.fail() and pytest.skip() raise (not of pytest.exit()'s).


def call_arguments(item: pytest.Function) -> dict[str, Any]:
    """The arguments pytest calls the test function of ``item`` with: its fixtures' values, by name
    (as pytest's own ``pytest_pyfunc_call`` builds them)."""
    return {arg: item.funcargs[arg] for arg in item._fixtureinfo.argnames}


def has_parametrized_fixture(item: pytest.Function) -> bool:
    """Whether one of the fixtures ``item`` uses is parametrized (``@pytest.fixture(params=...)``)."""
    return any(fixturedef.params for defs in item._fixtureinfo.name2fixturedefs.values() for fixturedef in defs)


def run_test_protocol(item: pytest.Item, nextitem: Any) -> list[pytest.TestReport]:
    """Run ``item``'s set-up, call and teardown, tearing down to what ``nextitem`` needs (the session:
    everything above it), without logging the reports; they are returned instead."""
    from _pytest.runner import runtestprotocol

    return runtestprotocol(item, log=False, nextitem=nextitem)


def end_test_loop(session: pytest.Session) -> None:
    """End a ``pytest_runtestloop`` as pytest's own does: raise what a failed or stopped session raises."""
    if session.shouldfail:
        raise session.Failed(session.shouldfail)
    if session.shouldstop:
        raise session.Interrupted(session.shouldstop)
