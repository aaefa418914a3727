"""Rank pools: a set of ranks in one process group that run each example together.

One protocol, two transports; the driver side here, the rank side in ``rank/``::

    controller.py   what a pool is (Pool) and the driver's logic both transports share (Controller)
    messages.py     the named messages between the controller and its ranks (framing.py: on the pipes)
    local.py        transport 1: RankPool, rank processes started here, over pipes (each runs rank/spawned.py)
    starting.py     how they start: forked from multiprocessing's fork server where safe, else spawned; spares
    torchrun.py     transport 2: TorchrunPool, torchrun's processes, over torchrun's store
    torchrun_stop.py  under torchrun, a SIGTERM during an example: a rank died, or the job is being stopped
    hangs.py        why ranks hung, from every rank's snapshot
    torchrun_auth.py  under torchrun, the secret that signs every value in torchrun's store
    signals.py, remote.py, capabilities/, observability.py, input_coverage.py: what the driver needs
                    around an example (chained signal handlers, remote exceptions, what the machine and
                    the ranks support, Hypothesis observations and events)
    private_file.py a secret read from a file only its owner can read (passwords, torchrun's key)
    leftovers.py    what a pool's processes leave in the temporary folder, and how it goes away
    line_coverage.py  ``--cover``: which packages to measure, and the lines the ranks reached, merged
    process_cover.py  ``--cover`` in the processes a property starts itself (torchrun's agent, workers)
    rank/           inside a rank: worker.py answers the messages and runs each call isolated
                    (isolation.py) and seeded; spawned.py, a spawned rank's entry point; context.py,
                    rank_state.py, rank_output.py, process_tree.py

Public names:

* Pool: the protocol (``run``, ``world_size``, ``start``, ``close``, context manager).
* RankPool: spawns ``world_size`` local rank processes and restarts them after a failure.
* TorchrunPool: rank 0's pool under torchrun (the other ranks call ``torchrun.serve``).
* PoolGone: raised by a spent TorchrunPool.
* DEFAULT_TIMEOUT, DEFAULT_STARTUP_TIMEOUT: seconds, per example and for starting the ranks.
"""

from fuzzdist.errors import PoolGone
from fuzzdist.pool.controller import DEFAULT_TIMEOUT, Pool
from fuzzdist.pool.local import DEFAULT_STARTUP_TIMEOUT, RankPool
from fuzzdist.pool.torchrun import TorchrunPool, TorchrunPoolCache, in_torchrun

__all__ = [
    "DEFAULT_STARTUP_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "Pool",
    "PoolGone",
    "RankPool",
    "TorchrunPool",
    "TorchrunPoolCache",
    "in_torchrun",
]
