"""pytest plugin for ProcessGroup conformance (register as a ``pytest11`` entry point).

Adds:

* ``--fuzzdist-pg MODULE:CALLABLE``: the ProcessGroup factory to check
  (else the ``FUZZDIST_PG`` environment variable, else
  ``fuzzdist.conformance:gloo``);
* ``--fuzzdist-pg-world-sizes N[,N...]``: the world sizes (default 1,2,3);
* fixture ``pg_factory``: the factory's ``module:callable`` name;
* fixture ``pg_conformance``: a session-wide
  :class:`~fuzzdist.conformance.ConformanceSession` over the session's rank
  pools (``rank_pools``); ``pg_conformance.run(check)`` fuzzes one check
  under the current Hypothesis profile and returns its ``OpReport``;
* a terminal summary of what the backend does not implement, once per item.

``properties/test_pg_conformance.py`` runs every check with these.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fuzzdist.conformance._engine import ConformanceSession
from fuzzdist.conformance._options import DEFAULT_FACTORY, DEFAULT_WORLD_SIZES
from fuzzdist.errors import FactoryError

_SESSIONS = pytest.StashKey[list[ConformanceSession]]()  # config.stash: the sessions to summarise


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fuzzdist", "fuzzdist: property testing of torch.distributed")
    group.addoption(
        "--fuzzdist-pg",
        default=None,
        metavar="MODULE:CALLABLE",
        help="ProcessGroup factory for the conformance properties, called on every rank as "
        "factory(rank, world_size, store, device) (default: $FUZZDIST_PG, else "
        f"{DEFAULT_FACTORY})",
    )
    group.addoption(
        "--fuzzdist-pg-world-sizes",
        default=None,
        metavar="N[,N...]",
        help=f"world sizes the conformance properties check (default {','.join(map(str, DEFAULT_WORLD_SIZES))})",
    )


def _world_sizes(config: pytest.Config) -> tuple[int, ...]:
    value = config.getoption("fuzzdist_pg_world_sizes", default=None)
    if not value:
        return DEFAULT_WORLD_SIZES
    try:
        sizes = tuple(int(v) for v in str(value).split(",") if v.strip())
    except ValueError:
        raise pytest.UsageError(f"--fuzzdist-pg-world-sizes takes comma-separated ints, got {value!r}") from None
    if not sizes or min(sizes) < 1:
        raise pytest.UsageError(f"--fuzzdist-pg-world-sizes takes positive ints, got {value!r}")
    return sizes


@pytest.fixture(scope="session")
def pg_factory(request: pytest.FixtureRequest) -> str:
    """The ProcessGroup factory under test, as 'module:callable'."""
    return request.config.getoption("fuzzdist_pg", default=None) or os.environ.get("FUZZDIST_PG") or DEFAULT_FACTORY


@pytest.fixture(scope="session")
def pg_conformance(request: pytest.FixtureRequest, pg_factory: str, rank_pools) -> Iterator[ConformanceSession]:
    """A conformance session for ``pg_factory`` over the session's CPU rank pools."""
    from fuzzdist.driver.plugin import PoolKey

    config = request.config
    timeout = float(config.getoption("fuzzdist_timeout", default=30.0))

    def pool_for(world_size: int):
        return rank_pools.get(PoolKey(world_size, "gloo", "cpu", timeout))

    try:
        session = ConformanceSession(pg_factory, world_sizes=_world_sizes(config), pools=pool_for, timeout=timeout)
    except FactoryError as exc:
        pytest.fail(f"--fuzzdist-pg: {exc}", pytrace=False)
    config.stash.setdefault(_SESSIONS, []).append(session)
    yield session
    session.close()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    for session in config.stash.get(_SESSIONS, []):
        report = session.report
        unsupported = report.unsupported
        if not unsupported and not report.factory_errors:
            continue
        terminalreporter.section(f"fuzzdist conformance: {report.factory} ({report.backend or 'no backend'})")
        for w, message in sorted(report.factory_errors.items()):
            terminalreporter.write_line(f"factory failed at world size {w}: {message.splitlines()[0]}")
        if unsupported:
            terminalreporter.write_line("unsupported (not failures):")
            for u in unsupported:
                terminalreporter.write_line(f"  {u}")
