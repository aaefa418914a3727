"""check-pg subjects that start processes, as torchft's ProcessGroupBabyGloo does: each rank's group
runs gloo in a child process and only moves raw bytes over a pipe.  allreduce, broadcast and barrier
are implemented; the rest are refused as a Python ProcessGroup refuses what it lacks.

Factories (``factory(rank, world_size, store, device)``):

- ``child_gloo``: conforms (gloo's own known bugs aside);
- ``child_dies_on_bool``: the child exits (code 9) when asked to allreduce a bool tensor: its rank
  then raises EOFError (the pipe's other end is gone), which must read as a crash of the subject,
  with the child's exit as evidence, not as a refusal;
- ``child_exits_after_refusing``: the child sends back gloo's error for what gloo refuses (int16...),
  then exits, as torchft's ProcessGroupBaby's worker does: the rank's next call finds the pipe closed;
- ``slow_child_gloo``: ``child_gloo`` whose factory takes SLOW_BUILD_S more (a slow-starting group).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

_TIMEOUT_S = 30.0
SLOW_BUILD_S = 12.0


def _pack(t: torch.Tensor) -> tuple[str, tuple[int, ...], bytes]:
    flat = t.detach().contiguous().reshape(-1)
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), flat.view(torch.uint8).numpy().tobytes()


def _unpack(packed: tuple[str, tuple[int, ...], bytes]) -> torch.Tensor:
    name, shape, data = packed
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return raw.view(getattr(torch, name)).reshape(shape)


def _child(rank: int, world_size: int, conn: Any, die_on_bool: bool, exit_after_refusing: bool = False) -> None:
    """Host (rank 0) or join the children's TCPStore, build gloo, then serve calls until EOF."""
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False) if rank == 0 else None
    conn.send(store.port if store is not None else None)
    port = conn.recv()
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False, timeout=timedelta(seconds=_TIMEOUT_S))
    pg = dist.ProcessGroupGloo(store, rank, world_size, timedelta(seconds=_TIMEOUT_S))
    conn.send("ready")
    while True:
        try:
            op, packed, arg = conn.recv()
        except EOFError:
            return
        tensors = [_unpack(p) for p in packed]
        try:
            if op == "allreduce":
                if die_on_bool and tensors[0].dtype == torch.bool:
                    os._exit(9)  # the planted crash
                opts = dist.AllreduceOptions()
                opts.reduceOp = getattr(dist.ReduceOp, arg)
                pg.allreduce(tensors, opts).wait()
            elif op == "broadcast":
                opts = dist.BroadcastOptions()
                opts.rootRank = arg
                pg.broadcast(tensors, opts).wait()
            else:
                pg.barrier().wait()
        except Exception as exc:  # noqa: BLE001 - goes back to the rank, raised there
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            if exit_after_refusing:  # as torchft's ProcessGroupBaby's worker: any error ends it
                conn.close()
                time.sleep(0.5)  # the rank sees the closed pipe before the process has exited
                os._exit(1)
            continue
        conn.send(("ok", [_pack(t) for t in tensors]))


class ChildGloo(dist.ProcessGroup):
    """A ProcessGroup whose collectives run in a child process of the rank."""

    def __init__(
        self, rank: int, world_size: int, store: Any, die_on_bool: bool = False, exit_after_refusing: bool = False
    ) -> None:
        super().__init__(rank, world_size)
        ctx = mp.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self.child = ctx.Process(
            target=_child,
            args=(rank, world_size, child_conn, die_on_bool, exit_after_refusing),
            name=f"child-gloo-rank{rank}",
            daemon=True,
        )
        self.child.start()
        child_conn.close()
        port = self._receive()
        if rank == 0:
            store.set("child_port", str(port))
        else:
            port = int(store.get("child_port"))
        self._conn.send(port)
        self._receive()

    def _receive(self) -> Any:
        if not self._conn.poll(_TIMEOUT_S):
            raise TimeoutError(f"the child process did not answer within {_TIMEOUT_S:g}s")
        return self._conn.recv()  # EOFError once the child is gone

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
        return "child-gloo"

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        return self._run("allreduce", tensors, opts.reduceOp.op.name)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        return self._run("broadcast", tensors, opts.rootRank)

    def barrier(self, opts: Any = None) -> Any:
        return self._run("barrier", [], None)


def child_gloo(rank: int, world_size: int, store: Any, device: torch.device) -> ChildGloo:
    return ChildGloo(rank, world_size, store)


def marked_child_gloo(rank: int, world_size: int, store: Any, device: torch.device) -> ChildGloo:
    """child_gloo, and a line in the file $FUZZDIST_TEST_MARKS each time a rank has built one: a test
    sees when check-pg is at work without guessing from the clock."""
    group = ChildGloo(rank, world_size, store)
    with open(os.environ["FUZZDIST_TEST_MARKS"], "a", encoding="utf-8") as marks:
        marks.write(f"{rank}\n")
    return group


def child_dies_on_bool(rank: int, world_size: int, store: Any, device: torch.device) -> ChildGloo:
    return ChildGloo(rank, world_size, store, die_on_bool=True)


def child_exits_after_refusing(rank: int, world_size: int, store: Any, device: torch.device) -> ChildGloo:
    return ChildGloo(rank, world_size, store, exit_after_refusing=True)


def slow_child_gloo(rank: int, world_size: int, store: Any, device: torch.device) -> ChildGloo:
    time.sleep(SLOW_BUILD_S)
    return ChildGloo(rank, world_size, store)
