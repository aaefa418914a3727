"""fuzzdist: Hypothesis-driven property and fuzz testing for torch.distributed.

Public API:
    RankPool: a persistent pool of rank processes; ``pool.run(fn, *args)``
        runs ``fn(ctx, *args)`` on every rank at once.
    RankContext: the ``ctx`` a rank function receives.
    RankFailure and its kinds RankError, RankTimeout, RankCrash.
    CapabilityError, PoolStartupError: the machine can't run what was asked.
    ReorderingProcessGroup: wraps any ProcessGroup and releases its Work
        objects in a drawn completion order.
    strategies: Hypothesis strategies for distributed inputs.
    profiles: the Hypothesis profiles fuzzdist registers (ci, dev, campaign, replay).
"""

from fuzzdist import profiles
from fuzzdist.context import RankContext
from fuzzdist.errors import (
    CapabilityError,
    FuzzdistError,
    PoolStartupError,
    RankCrash,
    RankError,
    RankFailure,
    RankTimeout,
)
from fuzzdist.pool import RankPool
from fuzzdist.reorder import ReorderingProcessGroup

__version__ = "0.1.0"

__all__ = [
    "CapabilityError",
    "FuzzdistError",
    "PoolStartupError",
    "RankContext",
    "RankCrash",
    "RankError",
    "RankFailure",
    "RankPool",
    "RankTimeout",
    "ReorderingProcessGroup",
    "profiles",
]
