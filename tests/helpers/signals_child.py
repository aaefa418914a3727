"""A process for tests/pool/test_signals.py: fuzzdist's SIGTERM handlers over SIG_DFL, as in a real run.

    python tests/helpers/signals_child.py compose|pool-idle|pool-in-flight|pool-stopped
    python tests/helpers/signals_child.py campaign-in-flight dead|marked|beating
    python tests/helpers/signals_child.py serving-rank python|blocked MARK_FILE

Rank 0's TorchrunPool is made in this process over a TCPStore it hosts
(no other rank exists: rank 1 never answers; a test may mark its SIGTERM or
beat for it).  Prints one JSON line per outcome; a process the signal ended
prints nothing after "raising".
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import types


def _pool(world_size: int = 2):
    import torch
    import torch.distributed as dist

    from fuzzdist.pool.torchrun import TorchrunPool, use_signer
    from fuzzdist.pool.torchrun_auth import Signer

    use_signer(Signer(b"a test secret of 32 bytes ......", "signals_child"))  # what join() sets up
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port))
    ctx = types.SimpleNamespace(
        rank=0, world_size=world_size, backend="gloo", device=torch.device("cpu"), group=None, store=store
    )
    return store, TorchrunPool(ctx, store, timeout=60)


def _say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def compose() -> None:
    """fuzzdist run's handlers and the pool's, installed in both orders: both run, the process lives on."""
    from fuzzdist.cli.run import _interrupts
    from fuzzdist.errors import Terminated

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
        _say(
            pool_first=pool_first,
            raised=raised,
            campaign_saw=seen,
            pool_stopping=pool.stopping,
            restored=signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        )
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


def _rank1(store, how: str) -> None:
    """Play rank 1 in the store: it received the SIGTERM (marked), or is alive and beating, or is dead."""
    from fuzzdist.pool import torchrun
    from fuzzdist.pool.torchrun_stop import mark_key

    if how == "marked":
        store.set(mark_key(torchrun._PREFIX, 1), b"1")
    elif how == "beating":

        def beat() -> None:
            while True:
                store.add(torchrun._alive_key(1), 1)
                time.sleep(0.1)

        threading.Thread(target=beat, daemon=True).start()


def pool_stopped() -> None:
    """A bare pool over SIG_DFL, an example in flight, and rank 1 marked its SIGTERM too: the job is being
    stopped, nothing died, so no RankCrash: the process ends as SIGTERM says."""
    store, pool = _pool()
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
    _rank1(store, "marked")
    _say(raising=True)
    try:
        pool.run(id)
    except BaseException as exc:  # noqa: BLE001
        _say(raised=type(exc).__name__)


def campaign_in_flight(how: str) -> None:
    """fuzzdist run's handlers over the pool's, SIGTERM during an example, rank 1 dead, marked or beating:
    what the first run raises (RankCrash or the campaign's Terminated) and then the second."""
    from fuzzdist.cli.run import _interrupts

    store, pool = _pool()
    _rank1(store, how)
    outcome: dict = {}
    with _interrupts(lambda name: outcome.setdefault("campaign_saw", name)):
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
        for attempt in ("first", "second"):
            started = time.monotonic()
            try:
                pool.run(id)  # rank 1 never answers: the example waits until the SIGTERM
            except BaseException as exc:  # noqa: BLE001
                outcome[attempt] = [type(exc).__name__, getattr(exc, "ranks", None)]
            outcome[f"{attempt}_s"] = round(time.monotonic() - started, 1)
    pool.close()
    _say(**outcome)


def hold_default(ending: str) -> None:
    """A chain over SIG_DFL, SIGTERM inside a Hold: the process lives to the hold's end, then SIGTERM ends it
    (the hold ended normally) or not (it ended with a failure of its own, which goes on)."""
    from fuzzdist.pool.signals import ChainedHandler, Hold

    ChainedHandler(signal.SIGTERM, lambda signum, frame: _say(handler_ran=True))
    try:
        with Hold(signal.SIGTERM):
            signal.raise_signal(signal.SIGTERM)
            _say(held=True)
            if ending == "failure":
                raise ValueError("a failure to report")
    except ValueError as exc:
        _say(raised=str(exc))
    _say(survived=True)


def serving_rank(how: str, mark_file: str) -> None:
    """A serving rank's SigtermMark over SIG_DFL; its main thread in Python code or blocked in C (as in a
    collective: a second lock of a held pthread mutex, which signals don't interrupt) when SIGTERM comes."""
    import ctypes

    from fuzzdist.pool.torchrun_stop import SigtermMark

    class FileStore:  # the mark lands in a file the test reads
        def set(self, key: str, value: bytes) -> None:
            with open(mark_file, "w") as f:
                f.write(key)

    SigtermMark(FileStore(), "fuzzdist/run/0/sigterm/1")
    _say(raising=True)
    if how == "blocked":
        libc = ctypes.CDLL(None)
        mutex = ctypes.create_string_buffer(128)
        libc.pthread_mutex_init(mutex, None)
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # blocks for good, GIL released, like a collective waiting for a peer
    else:
        time.sleep(60)
    _say(survived=True)


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    {
        "compose": compose,
        "pool-idle": pool_idle,
        "pool-in-flight": pool_in_flight,
        "pool-stopped": pool_stopped,
        "campaign-in-flight": campaign_in_flight,
        "hold-default": hold_default,
        "serving-rank": serving_rank,
    }[mode](*rest)
    sys.stdout.flush()
    os._exit(0)  # rank 0's example thread may still wait for the rank that never was
