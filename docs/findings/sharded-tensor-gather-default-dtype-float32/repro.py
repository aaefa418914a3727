"""sharded-tensor-gather-default-dtype-float32: ShardedTensor.gather rounds values through float32.

``ShardedTensor.gather(dst, out)`` ("Creates a full Tensor on rank ``dst`` by gathering all shards of
the sharded tensor"; ``dtype``: "Force the gathered tensors to be this dtype. Default: None") builds
its send and receive buffers with ``torch.empty(..., dtype=dtype)``.  With the default ``dtype=None``
those buffers get torch's default dtype, float32, whatever the sharded tensor's dtype, so an int64,
int32 or float64 tensor arrives in ``out`` rounded to float32.  Two ranks shard
``torch.arange(4, dtype=torch.int64) + 2**30 + 1`` with ``ChunkShardingSpec(dim=0, placements=["rank:0/cpu",
"rank:1/cpu"])`` and gather it to rank 0 (and the same in int32 and float64).  ShardedTensor is deprecated
in favour of DTensor: the script also sends the same tensors through ``distribute_tensor(..., [Shard(0)])``
and ``full_tensor()`` and reports what comes back.

    python docs/findings/sharded-tensor-gather-default-dtype-float32/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ..."),
3 when its ranks did not start in time ("NO VERDICT: ...", a busy machine).
"""
import multiprocessing as mp
import queue
import socket
import sys
import time
import traceback
from datetime import timedelta

STARTUP_S = 300  # bounds the ranks' start-up (importing torch, the rendezvous), which is not part of the bug:
# generous, since on a busy machine it can take minutes; past it the script says NO VERDICT (exit 3)


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import warnings

    import torch
    import torch.distributed as dist
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    warnings.simplefilter("ignore")  # ShardedTensor's deprecation FutureWarnings
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    got = {}
    for name in ("int64", "int32", "float64"):
        dtype = getattr(torch, name)
        full = torch.arange(4, dtype=dtype) + (2**30 + 1)
        spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(world_size)])
        sharded = spec.shard(full.clone(), src_rank=0, process_group=dist.group.WORLD)
        out = torch.zeros_like(full) if rank == 0 else None
        sharded.gather(dst=0, out=out)
        if rank == 0:
            got[name] = (full.tolist(), out.tolist())
    # ShardedTensor is deprecated for DTensor: the same tensors through DTensor's Shard(0) and full_tensor()
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = DeviceMesh("cpu", list(range(world_size)))
    replacement = {}
    for name in ("int64", "int32", "float64"):
        full = torch.arange(4, dtype=getattr(torch, name)) + (2**30 + 1)
        back = distribute_tensor(full, mesh, [Shard(0)]).full_tensor()
        replacement[name] = "kept the values" if torch.equal(back, full) else f"gave {back.tolist()}"
    results.put((rank, (got, replacement)))
    dist.destroy_process_group()


def answer(results, ranks, timeout=STARTUP_S):
    """The next result from the ranks.  A rank that died (an exception, a signal) without answering is an error
    of the script on this torch (exit 2), not a slow machine; none answering within ``timeout`` raises
    queue.Empty (no verdict)."""
    end = time.monotonic() + timeout
    while True:
        try:
            return results.get(timeout=min(1.0, max(0.01, end - time.monotonic())))
        except queue.Empty:
            gone = [f"rank {r} (exit code {p.exitcode})" for r, p in enumerate(ranks) if p.exitcode not in (None, 0)]
            if gone:
                try:  # what it put just before exiting may still be on its way
                    return results.get(timeout=1.0)
                except queue.Empty:
                    raise RuntimeError(f"{', '.join(gone)} exited without answering: see its traceback above") from None
            if time.monotonic() >= end:
                raise


def main():
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    ranks = [ctx.Process(target=rank_main, args=(r, 2, port, results), daemon=True) for r in range(2)]
    for p in ranks:
        p.start()
    try:
        both = dict(answer(results, ranks) for _ in ranks)
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    got = {rank: gathered for rank, (gathered, _) in both.items()}
    instead = "; the replacement, DTensor Shard(0) -> full_tensor(): " + ", ".join(
        f"{name} {what}" for name, what in both[0][1].items())
    wrong = {name: pair for name, pair in got[0].items() if pair[0] != pair[1]}
    if wrong:
        print("BUG: ShardedTensor.gather(dst=0, out=out) rounded through float32: "
              + "; ".join(f"{name} {full} gathered as {out}" for name, (full, out) in wrong.items()) + instead)
        return 1
    print(f"FIXED: ShardedTensor.gather kept the values: {got[0]}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except queue.Empty:  # a wait that is not part of the bug ran out: a slow machine, not a verdict
        print(f"NO VERDICT: the ranks did not answer within {STARTUP_S} s of starting (a busy machine?); "
              "run it again on a quieter one")
        sys.exit(3)
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
