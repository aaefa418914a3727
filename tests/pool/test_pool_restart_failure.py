"""A RankPool whose ranks can't be restarted (a full $TMPDIR, no memory) is spent: the failure in flight stays
the example's, and every later run raises PoolGone (which Hypothesis neither saves nor shrinks), never an
internal error of the pool."""

from __future__ import annotations

import pytest
from helpers import rank_fns

from fuzzdist import RankCrash, RankPool
from fuzzdist.driver.plugin import PoolCache, PoolKey
from fuzzdist.errors import PoolGone, PoolStartupError


def _no_more_ranks(pool: RankPool, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """Every later start of a rank set fails with ``error`` (what a full $TMPDIR does to a restart)."""

    def refuse():
        raise error

    monkeypatch.setattr(pool, "_start_set", refuse)


@pytest.mark.parametrize(
    "error", [PoolStartupError("planted: no room for the ranks' store"), OSError(28, "No space left on device")]
)
def test_a_restart_that_fails_keeps_the_crash_and_then_the_pool_is_gone(monkeypatch, error):
    with RankPool(2, timeout=10, spares="never") as pool:
        _no_more_ranks(pool, monkeypatch, error)
        with pytest.raises(RankCrash) as crash:  # the example's own failure, not the restart's
            pool.run(rank_fns.die_on, 1, "exit")
        assert crash.value.ranks == [1]
        assert pool.spent and pool.pids == []
        for _ in range(2):  # not an IndexError of a pool with no ranks
            with pytest.raises(PoolGone) as gone:
                pool.run(rank_fns.whoami)
        assert "its ranks could not be restarted" in str(gone.value)
        assert "No space left on device" in str(gone.value) or "planted: no room" in str(gone.value)
        assert isinstance(gone.value.failure, PoolStartupError)


def test_ranks_that_die_between_examples_and_cant_restart_make_the_pool_gone(monkeypatch):
    with RankPool(2, timeout=10, spares="never") as pool:
        pool.start()
        _no_more_ranks(pool, monkeypatch, PoolStartupError("planted: can't start"))
        for r in pool._ranks:
            r.process.kill()
            r.process.join(10)
        with pytest.warns(RuntimeWarning, match="died between examples"), pytest.raises(PoolGone):
            pool.run(rank_fns.whoami)


def test_restarted_ranks_that_cant_join_make_the_pool_gone(monkeypatch):
    with RankPool(2, timeout=10, spares="never") as pool:
        with pytest.raises(RankCrash):
            pool.run(rank_fns.die_on, 0, "exit")  # the restart started fresh ranks

        def cannot_join():
            pool._kill()
            raise PoolStartupError("planted: rank 1 could not join the gloo process group")

        monkeypatch.setattr(pool, "_wait_ready", cannot_join)
        with pytest.raises(PoolGone) as gone:
            pool.run(rank_fns.whoami)
        assert "could not join" in str(gone.value) and pool.spent


# A property whose third example kills rank 1; from then on no rank set can start (the conftest).
CRASH_THEN_NO_RESTART = """
import os
from hypothesis import given, settings, strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

calls = []

def die_or_echo(ctx, die):
    if die and ctx.rank == 1:
        os._exit(3)
    return ctx.rank

@settings(database=DirectoryBasedExampleDatabase("db"), max_examples=50)
@given(n=st.integers(0, 100))
def test_prop(rank_pool, n):
    calls.append(n)
    if len(calls) == 3:
        rank_pool._start_set = no_more_ranks
    rank_pool.run(die_or_echo, len(calls) == 3)

def no_more_ranks():
    from fuzzdist.errors import PoolStartupError
    raise PoolStartupError("planted: no room for the ranks")
"""


def test_under_pytest_the_crash_is_saved_and_the_pool_that_could_not_restart_is_not(pytester):
    """`pytest` with the fuzzdist plugin: the property's crash is saved to the database; the spent pool ends
    the test with its own error, neither saved nor shrunk as a failure of the property."""
    pytester.makepyfile(test_prop=CRASH_THEN_NO_RESTART)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "0", "--fuzzdist-world-size=2")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "PoolGone: the rank pool can't run examples: its ranks could not be restarted" in out, out
    assert "planted: no room for the ranks" in out
    assert "IndexError" not in out
    assert len(_entries(pytester.path / "db")) == 1  # the crash's example; nothing from the spent pool


def _entries(folder) -> list[bytes]:
    """Every example a directory database holds, under any key."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    db = DirectoryBasedExampleDatabase(str(folder))
    return [value for key in db.fetch(b".hypothesis-keys") for value in db.fetch(key)]


def test_the_session_pool_cache_replaces_a_spent_pool(monkeypatch):
    cache = PoolCache()
    try:
        key = PoolKey(1, "gloo", "cpu", 10.0)
        pool = cache.get(key)
        _no_more_ranks(pool, monkeypatch, PoolStartupError("planted"))
        with pytest.raises(RankCrash):
            pool.run(rank_fns.die_on, 0, "exit")
        assert pool.spent
        fresh = cache.get(key)  # the next property's set-up tries again
        assert fresh is not pool and not fresh.spent
        assert fresh.run(rank_fns.whoami) == [(0, 1, "cpu", "gloo")]
    finally:
        cache.close()


def test_a_spent_pool_revives_once_ranks_can_start_again(monkeypatch):
    with RankPool(1, timeout=10, spares="never") as pool:
        _no_more_ranks(pool, monkeypatch, PoolStartupError("planted: no room"))
        with pytest.raises(RankCrash):
            pool.run(rank_fns.die_on, 0, "exit")
        with pytest.raises(PoolStartupError, match="planted: no room"):  # still no room: it stays spent
            pool.revive()
        assert pool.spent
        monkeypatch.undo()  # the room is back
        pool.revive()
        assert not pool.spent and pool.run(rank_fns.whoami) == [(0, 1, "cpu", "gloo")]


def test_first_ranks_that_cant_join_never_leave_a_pool_of_no_ranks(monkeypatch):
    pool = RankPool(1, timeout=10, spares="never")
    try:
        real_wait = pool._wait_ready

        def fails_once():
            monkeypatch.setattr(pool, "_wait_ready", real_wait)
            pool._kill()
            raise PoolStartupError("planted: rank 0 could not join the gloo process group")

        monkeypatch.setattr(pool, "_wait_ready", fails_once)
        with pytest.raises(PoolStartupError):  # the first start's own error
            pool.start()
        with pytest.raises(PoolGone, match="could not join"):  # not an IndexError of a pool with no ranks
            pool.run(rank_fns.whoami)
    finally:
        pool.close()
