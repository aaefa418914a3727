"""fuzzdist: Hypothesis-driven property and fuzz testing for torch.distributed.

Public API:

* RankPool: a persistent pool of rank processes; ``pool.run(fn, *args)`` runs ``fn(ctx, *args)`` on every rank at once.
* Pool: what every pool is (RankPool, and fuzzdist.pool.TorchrunPool under torchrun).
* RankContext: the ``ctx`` a rank function receives.
* FuzzdistError: the base of every error fuzzdist raises (fuzzdist.errors).
* RankFailure and its kinds RankError, RankTimeout, RankCrash: also AssertionErrors.
* Hang: why a RankTimeout's ranks hung (CollectiveMismatch, MissedCollective, ...; fuzzdist.pool.hangs).
* watch_pending, PendingWorkSource: have a hang name the Works your own ProcessGroup holds.
* PropertyFailure: a property of fuzzdist.properties does not hold (an AssertionError).
* CapabilityError, PoolStartupError: the machine can't run what was asked.
* InvalidArgument (a ValueError), CallError (a TypeError), InvalidState (a RuntimeError).
* ReorderingProcessGroup: wraps any ProcessGroup and releases its Work objects in a drawn completion order.
* keep_process_groups: groups created inside it outlive the example (a per-process DeviceMesh cache).
* strategies: Hypothesis strategies for distributed inputs.
* profiles: the Hypothesis profiles fuzzdist registers (ci, dev, campaign, replay).
"""

from fuzzdist.driver import profiles
from fuzzdist.errors import (
    CallError,
    CapabilityError,
    FuzzdistError,
    Hang,
    InvalidArgument,
    InvalidState,
    PoolStartupError,
    PropertyFailure,
    RankCrash,
    RankError,
    RankFailure,
    RankTimeout,
)
from fuzzdist.pool import Pool, RankPool
from fuzzdist.pool.rank.context import RankContext
from fuzzdist.pool.rank.isolation import keep_process_groups
from fuzzdist.pool.rank.rank_state import PendingWorkSource, watch_pending
from fuzzdist.toolkit.reorder import ReorderingProcessGroup

__version__ = "0.1.0"

__all__ = [
    "CallError",
    "CapabilityError",
    "FuzzdistError",
    "Hang",
    "InvalidArgument",
    "InvalidState",
    "PendingWorkSource",
    "Pool",
    "PoolStartupError",
    "PropertyFailure",
    "RankContext",
    "RankCrash",
    "RankError",
    "RankFailure",
    "RankPool",
    "RankTimeout",
    "ReorderingProcessGroup",
    "keep_process_groups",
    "profiles",
    "watch_pending",
]
