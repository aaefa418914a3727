"""fuzzdist's pytest hooks, registered by :mod:`fuzzdist.driver.plugin` (``pytest_addhooks``).

Implement one in a ``conftest.py`` or a plugin, as any pytest hook::

    def pytest_fuzzdist_make_pool_cache(config):
        return MyPools(config)

``fuzzdist run`` under ``torchrun`` implements it to hand every property the
pool torchrun formed (``fuzzdist.pool.torchrun.TorchrunPoolCache``).
"""

from __future__ import annotations

from typing import Any, Protocol

import pytest


class RankPools(Protocol):
    """What the hook returns: the session's pools, by :class:`fuzzdist.driver.plugin.PoolKey`."""

    def get(self, key: Any) -> Any:
        """The started pool for ``key``; CapabilityError if this cache can't serve it."""

    def close(self) -> None:
        """Close every pool; called once at the end of the session."""


@pytest.hookspec(firstresult=True)
def pytest_fuzzdist_make_pool_cache(config: pytest.Config) -> RankPools | None:
    """Return the session's rank-pool cache, the object behind the ``rank_pools`` fixture.

    It needs ``get(key)``, which takes a :class:`fuzzdist.driver.plugin.PoolKey` and
    returns a started pool (a :class:`fuzzdist.RankPool`, or anything with its
    ``run``, ``world_size`` and ``close``), raising
    :class:`fuzzdist.errors.CapabilityError` for a key it can't serve (the
    test is skipped with its message); and ``close()``, called once at the
    end of the session.  Called once, from ``pytest_configure``; the first
    implementation that returns something other than None wins.  fuzzdist's
    own, tried last, returns a :class:`fuzzdist.driver.plugin.PoolCache`: one local
    ``RankPool`` per key, started on first use.
    """
