"""A ProcessGroup that runs its real group in a child process, as fault-tolerant groups do
(torchft's ProcessGroupBaby): the subject of the "ranks that start processes" tests.

Each rank's ``ChildProcessGroup`` spawns one child (multiprocessing, spawn)
that builds a gloo group with the other ranks' children over a TCPStore
hosted by rank 0's child, and runs every collective there; the rank only
moves tensors over a pipe, as raw bytes (so every dtype travels, whatever
torch's pickling of it does).  allreduce and broadcast are implemented; the
rest are refused the way a Python ProcessGroup refuses what it lacks.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

_TIMEOUT_S = 30.0  # every wait on the child is bounded (the pool's own timeout fires first)


def _pack(t: torch.Tensor) -> tuple[str, tuple[int, ...], bytes]:
    flat = t.detach().contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), data


def _unpack(packed: tuple[str, tuple[int, ...], bytes]) -> torch.Tensor:
    name, shape, data = packed
    dtype = getattr(torch, name)
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)


def _child(rank: int, world_size: int, conn: Any) -> None:
    """The child: host (rank 0) or join the TCPStore, build gloo, then serve collectives until EOF."""
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False) if rank == 0 else None
    conn.send(store.port if store is not None else None)
    port = conn.recv()
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False, timeout=timedelta(seconds=_TIMEOUT_S))
    pg = dist.ProcessGroupGloo(store, rank, world_size, timedelta(seconds=_TIMEOUT_S))
    conn.send(("ready", os.getpid()))
    while True:
        try:
            op, packed, arg = conn.recv()
        except EOFError:
            return
        tensors = [_unpack(p) for p in packed]
        try:
            if op == "allreduce":
                opts = dist.AllreduceOptions()
                opts.reduceOp = getattr(dist.ReduceOp, arg)
                pg.allreduce(tensors, opts).wait()
            else:
                opts = dist.BroadcastOptions()
                opts.rootRank = arg
                pg.broadcast(tensors, opts).wait()
        except Exception as exc:  # noqa: BLE001 - goes back to the rank, raised there
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("ok", [_pack(t) for t in tensors]))


class ChildProcessGroup(dist.ProcessGroup):
    """A ProcessGroup whose collectives run in a child process of the rank."""

    def __init__(self, rank: int, world_size: int, store: Any) -> None:
        super().__init__(rank, world_size)
        self._conn, child_conn = mp.get_context("spawn").Pipe()
        self.child = mp.get_context("spawn").Process(
            target=_child, args=(rank, world_size, child_conn), name=f"child-pg-rank{rank}", daemon=True
        )
        self.child.start()
        child_conn.close()
        port = self._receive()
        if rank == 0:
            store.set("child_store_port", str(port))
        else:
            port = int(store.get("child_store_port"))
        self._conn.send(port)
        _, self.child_pid = self._receive()

    def _receive(self) -> Any:
        if not self._conn.poll(_TIMEOUT_S):
            raise TimeoutError(f"the child process did not answer within {_TIMEOUT_S:g}s")
        return self._conn.recv()

    def _run(self, op: str, tensors: list[torch.Tensor], arg: Any) -> Any:
        self._conn.send((op, [_pack(t) for t in tensors], arg))
        status, value = self._receive()
        if status == "error":
            raise RuntimeError(f"{op} failed in the child process: {value}")
        with torch.no_grad():
            for t, packed in zip(tensors, value, strict=True):
                t.copy_(_unpack(packed))
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(tensors)
        return _create_work_from_future(future)

    def getBackendName(self) -> str:
        return "child-process-gloo"

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        return self._run("allreduce", tensors, opts.reduceOp.op.name)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        return self._run("broadcast", tensors, opts.rootRank)


def child_process_gloo(rank: int, world_size: int, store: Any, device: torch.device) -> ChildProcessGroup:
    """check-pg factory: gloo, run in a child process of each rank."""
    return ChildProcessGroup(rank, world_size, store)
