"""sharded-tensor-empty-shards-overlap: on torch 2.6.0, ChunkShardingSpec.shard of an empty tensor raises
"Shards ... overlap" on every rank.

``ChunkShardingSpec`` promises ``torch.chunk``'s partition ("The semantics of how a tensor is partitioned is
inline with :meth:`torch.chunk`").  Sharding ``torch.zeros(0)`` over 2 gloo ranks gives each rank an empty
shard at offset 0; torch 2.6.0's ``validate_non_overlapping_shards_metadata`` takes two empty shards at the
same offset for overlapping shards and raises ``ValueError`` on every rank.  The same check on its own
(no ranks: two ``ShardMetadata`` of size 0 at offset 0) raises too.  ShardedTensor is deprecated in favour
of DTensor: the script also reports what ``distribute_tensor(torch.zeros(0), mesh, [Shard(0)])`` gives.

    python docs/findings/sharded-tensor-empty-shards-overlap/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ..."),
3 when its ranks did not start in time ("NO VERDICT: ...", a busy machine).
"""
import multiprocessing as mp
import os
import queue
import socket
import sys
import traceback
from datetime import timedelta

STARTUP_S = 300  # bounds the ranks' start-up (importing torch, the rendezvous), which is not part of the bug:
# generous, since on a busy machine it can take minutes; past it the script says NO VERDICT (exit 3)
WORLD = 2


def rank_main(rank, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import warnings

    import torch
    import torch.distributed as dist
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    warnings.simplefilter("ignore")  # ShardedTensor's deprecation FutureWarnings
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=STARTUP_S))
    from torch.distributed.device_mesh import DeviceMesh

    try:
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:
        from torch.distributed._tensor import Shard, distribute_tensor
    try:
        local = distribute_tensor(torch.zeros(0), DeviceMesh("cpu", list(range(WORLD))), [Shard(0)])
        replacement = f"local shard {tuple(local.to_local().shape)}, full_tensor() {local.full_tensor().tolist()}"
    except Exception as e:  # noqa: BLE001 - reported as it is
        replacement = f"raised {type(e).__name__}: {' '.join(str(e).split())[:80]}"
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(WORLD)])
    try:
        sharded = spec.shard(torch.zeros(0), src_rank=0, process_group=dist.group.WORLD)
        shapes = [tuple(s.tensor.shape) for s in sharded.local_shards()]
        results.put((rank, "ok", f"local shards {shapes}", replacement))
    except Exception as e:  # noqa: BLE001 - what each rank raised is the verdict
        results.put((rank, "raised", f"{type(e).__name__}: {e}", replacement))
    os._exit(0)  # every outcome is in the pipe (SimpleQueue writes at once)


def main():
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    ranks = [ctx.Process(target=rank_main, args=(r, port, results), daemon=True) for r in range(WORLD)]
    for p in ranks:
        p.start()
    try:
        for p in ranks:
            p.join(timeout=STARTUP_S)  # the shard takes milliseconds once the ranks are up
        if any(p.is_alive() for p in ranks):
            raise queue.Empty  # still starting (or stuck) after STARTUP_S: no verdict
    finally:
        for p in ranks:
            p.kill()
    got = {}
    while not results.empty():
        rank, kind, detail, replacement = results.get()
        got[rank] = (kind, detail, replacement)
    if sorted(got) != list(range(WORLD)):
        raise RuntimeError(f"ranks {sorted(set(range(WORLD)) - set(got))} did not answer (exit codes "
                           f"{[p.exitcode for p in ranks]})")
    raised = {r: detail for r, (kind, detail, _) in got.items() if kind == "raised"}
    if raised:
        print(f"BUG: ChunkShardingSpec(dim=0, {WORLD} placements).shard(torch.zeros(0)) raised on ranks "
              f"{sorted(raised)}: rank 0: {raised.get(0, raised[min(raised)])} (the replacement, DTensor Shard(0), "
              f"rank 0: {got[0][2]})")
        return 1
    print(f"FIXED: sharding a (0,) tensor over {WORLD} placements works: "
          + "; ".join(f"rank {r}: {detail}" for r, (_, detail, _) in sorted(got.items())))
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
