import os

import pytest

pytest_plugins = ["pytester"]

# `fuzzdist run` uses every core by default; the tests' campaigns keep one worker unless they test that.
os.environ.setdefault("FUZZDIST_JOBS", "1")


@pytest.fixture
def forkable(monkeypatch):
    """For tests of forked ranks themselves: pools may fork even where an earlier test in this worker
    left the environment unlike the fork server's (auto would spawn then, and forkserver refuse)."""
    from fuzzdist.pool import starting

    monkeypatch.setattr(starting, "fork_server_fits", lambda: None)


@pytest.fixture(autouse=True)
def _pytester_environment_still_forks(request, monkeypatch):
    """pytester sets HOME, USERPROFILE and PY_COLORS for the runs it makes, which no rank of these tests
    reads; counted as an environment change, they would make every pool of such a test spawn its ranks
    (a torch import each) instead of forking them from the session's fork server."""
    if "pytester" in request.fixturenames:
        from fuzzdist.pool import starting

        monkeypatch.setattr(starting, "_VOLATILE", starting._VOLATILE | {"HOME", "USERPROFILE", "PY_COLORS"})


def pytest_configure(config):
    """Start the fork server now, in the session's own environment, as `fuzzdist run` does: a server
    first started inside a test that changed the environment would make every later pool spawn."""
    from fuzzdist.pool import starting

    xdist_controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    if not xdist_controller:  # the controller runs no test
        starting.start_fork_server_early()
