"""A process for tests/test_signals.py: fuzzdist's SIGTERM handlers over SIG_DFL, as in a real run.

    python tests/signals_child.py compose|pool-idle|pool-in-flight

Rank 0's TorchrunPool is made in this process over a TCPStore it hosts
(no other rank exists: rank 1 never answers).  Prints one JSON line per
outcome; a process the signal ended prints nothing after "raising".
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import types


def _pool(world_size: int = 2):
    import torch
    import torch.distributed as dist

    from fuzzdist.pool.torchrun import TorchrunPool

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port))
    ctx = types.SimpleNamespace(rank=0, world_size=world_size, backend="gloo", device=torch.device("cpu"),
                                group=None, store=store)
    return store, TorchrunPool(ctx, store, timeout=60)


def _say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def compose() -> None:
    """fuzzdist run's handlers and the pool's, installed in both orders: both run, the process lives on."""
    from fuzzdist.campaign.runner import Terminated
    from fuzzdist.cli.run import _interrupts

    store = None
    for pool_first in (True, False):
        seen: list[str] = []
        pool = None
        if pool_first:
            store, pool = _pool()
        try:
            with _interrupts(seen.append):
                if pool is None:
                    store, pool = _pool()
                signal.raise_signal(signal.SIGTERM)
        except Terminated as exc:
            raised = exc.signal_name
        else:
            raised = None
        pool.close()  # pool first: removed after the campaign's; pool last: removed after it too (interleaved)
        _say(pool_first=pool_first, raised=raised, campaign_saw=seen, pool_stopping=pool.stopping,
             restored=signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
    del store


def pool_idle() -> None:
    """A bare pool over SIG_DFL with no example in flight: nothing to save, so the process ends as SIGTERM says."""
    store, pool = _pool()
    _say(raising=True)
    signal.raise_signal(signal.SIGTERM)
    _say(survived=True, pool_stopping=pool.stopping)


def pool_in_flight() -> None:
    """A bare pool over SIG_DFL with an example in flight: the example is a RankCrash, then PoolGone."""
    from fuzzdist.errors import PoolGone, RankCrash

    store, pool = _pool()
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    outcome = {}
    try:
        pool.run(id)  # rank 1 never answers: the example waits until the SIGTERM
    except RankCrash as exc:
        outcome["first"] = ["RankCrash", exc.ranks]
    try:
        pool.run(id)
    except PoolGone:
        outcome["second"] = "PoolGone"
    pool.close()
    _say(pool_stopping=pool.stopping, **outcome)


if __name__ == "__main__":
    {"compose": compose, "pool-idle": pool_idle, "pool-in-flight": pool_in_flight}[sys.argv[1]]()
    sys.stdout.flush()
    os._exit(0)  # rank 0's example thread may still wait for the rank that never was
