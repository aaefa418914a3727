"""The code that runs inside a rank process.

A rank process joins the pool's process group once, then serves examples
until told to stop or until its driver goes away.  It never decides
anything: it runs ``fn``, reports the outcome, and restores its state.

Messages (pickled tuples over a private pipe):
  driver -> rank: ("run", seq, seed, payload, sys_path | None), ("stop",)
  rank -> driver: ("ready", pid), ("init-error", traceback),
                  ("ok", seq, result, recycle_reasons), ("err", seq, RemoteRecord, recycle_reasons),
                  ("load-error", seq, RemoteRecord, []): fn or its arguments could not be unpickled
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

STACK_SIGNAL = signal.SIGUSR1  # the driver sends it to dump a hung rank's stack


@dataclass(frozen=True)
class WorkerSpec:
    rank: int
    world_size: int
    backend: str
    device_type: str  # "cpu" or "cuda"
    pg_timeout_s: float
    num_threads: int  # intra-op threads: the ranks share the machine's cores
    store_path: str
    tmpdir: str
    stack_path: str  # faulthandler writes the stack here on STACK_SIGNAL
    crash_path: str  # ... and here on a fatal signal (SIGSEGV, SIGABRT, ...)


def main(spec: WorkerSpec, conn: Any) -> None:
    """Entry point of a rank process (the target of a spawned ``Process``)."""
    _exit_with_parent()
    stack_file = open(spec.stack_path, "w")  # noqa: SIM115 - lives as long as the process
    crash_file = open(spec.crash_path, "w")  # noqa: SIM115
    faulthandler.register(STACK_SIGNAL, file=stack_file, all_threads=True)
    faulthandler.enable(file=crash_file, all_threads=True)
    try:
        ctx = _join_group(spec)
    except BaseException:
        _send(conn, ("init-error", traceback.format_exc()))
        return
    _send(conn, ("ready", os.getpid()))
    _serve(ctx, conn)
    _leave_group()
    # Skip the interpreter's teardown of torch (a second or more): nothing is left to flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _join_group(spec: WorkerSpec):
    import torch
    import torch.distributed as dist

    from fuzzdist.context import RankContext

    if spec.backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        # Keep gloo's pairs on loopback, never on the host's public address.
        os.environ["GLOO_SOCKET_IFNAME"] = _loopback_interface()
    if spec.device_type == "cuda":
        device = torch.device("cuda", spec.rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.set_num_threads(spec.num_threads)
    store = dist.FileStore(spec.store_path, spec.world_size)
    kwargs: dict[str, Any] = {}
    if spec.backend == "nccl":
        kwargs["device_id"] = device  # eager init: a broken GPU fails here, not mid-example
    dist.init_process_group(
        spec.backend,
        store=store,
        rank=spec.rank,
        world_size=spec.world_size,
        timeout=timedelta(seconds=spec.pg_timeout_s),
        **kwargs,
    )
    group = dist.group.WORLD
    return RankContext(spec.rank, spec.world_size, device, spec.backend, group, store, spec.tmpdir)


def _serve(ctx: Any, conn: Any) -> None:
    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):  # the driver went away
            return
        if message[0] == "stop":
            return
        _, seq, seed, payload, sys_path = message
        if sys_path is not None:
            sys.path[:] = sys_path
        data = execute(ctx, seq, seed, payload)
        try:
            conn.send_bytes(data)
        except (BrokenPipeError, OSError):
            return


def execute(ctx: Any, seq: int, seed: int, payload: bytes) -> bytes:
    """Run one pickled call on this rank, isolated and seeded; return the pickled reply.

    Shared by the spawned pool's pipe loop and the torchrun executor.
    """
    from fuzzdist import _isolation, _remote

    guard = _isolation.StateGuard()
    ctx.seed, ctx.example = seed, seq
    ctx._recycle_reasons = []
    try:
        fn, args, kwargs = pickle.loads(payload)
    except BaseException as exc:  # noqa: BLE001
        return pickle.dumps(("load-error", seq, _remote.capture(exc), []))
    try:
        _isolation.seed_everything(seed, ctx.device.type == "cuda")
        result = fn(ctx, *args, **kwargs)
        reply = ("ok", seq, result, ctx._recycle_reasons)
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the driver
        reply = ("err", seq, _remote.capture(exc), ctx._recycle_reasons)
    reply[3].extend(guard.restore())
    try:
        return pickle.dumps(reply)
    except Exception as exc:  # an unpicklable return value
        err = TypeError(f"fn returned a value that can't be sent back to the driver: {exc}. "
                        "Return plain values (numbers, lists, CPU tensors), not handles.")
        return pickle.dumps(("err", seq, _remote.capture(err), reply[3]))


def _leave_group() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def _send(conn: Any, message: tuple) -> None:
    try:
        conn.send_bytes(pickle.dumps(message))
    except (BrokenPipeError, OSError):
        pass


def _loopback_interface() -> str:
    names = [name for _, name in socket.if_nameindex()]
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return next((n for n in names if n.startswith("lo")), "lo")


def _exit_with_parent() -> None:
    """Die when the driver dies, even while stuck in a collective."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(70)

    threading.Thread(target=watch, name="fuzzdist-parent-watch", daemon=True).start()
