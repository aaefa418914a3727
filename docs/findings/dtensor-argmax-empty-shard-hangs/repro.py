"""dtensor-argmax-empty-shard-hangs: argmax over a sharded dim hangs when a rank's shard is empty.

On 2 gloo ranks, x = DTensor.from_local(piece, mesh, [Shard(0)], shape=(1,)) (rank 0 holds the element,
rank 1 an empty piece, torch.chunk semantics), then torch.argmax(x, dim=0): rank 1 raises on its empty
piece before the all-gather DTensor's argmax handler issues, and rank 0 waits in that all-gather forever.

    python docs/findings/dtensor-argmax-empty-shard-hangs/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...").
"""
import os
import queue
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WAIT_S = 60


def rank_main(rank, world_size, port, results):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,))
    piece = torch.ones(1) if rank == 0 else torch.ones(0)
    x = DTensor.from_local(piece, mesh, [Shard(0)], run_check=False, shape=(1,), stride=(1,))
    try:
        out = torch.argmax(x, dim=0).full_tensor().item()
        results.put((rank, f"returned {out}"))
    except Exception as exc:
        results.put((rank, f"raised {type(exc).__name__}: {str(exc).splitlines()[0]}"))
    import time

    time.sleep(WAIT_S + 30)  # a long-lived rank (a pool's, a training job's) stays: its peer's wait never ends


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = mp.start_processes(rank_main, args=(2, port, results), nprocs=2, start_method="spawn", join=False)
    seen = {}
    try:
        while len(seen) < 2:
            rank, what = results.get(timeout=WAIT_S)
            seen[rank] = what
    except queue.Empty:
        pass
    for p in procs.processes:
        p.kill()
    if len(seen) < 2 or any(w.startswith("raised") for w in seen.values()):
        print(f"BUG: argmax over a Shard(0) (1,) DTensor on 2 ranks: {seen}; a rank raised or never returned "
              f"within {WAIT_S} s")
        sys.exit(1)
    print(f"FIXED: {seen}")


if __name__ == "__main__":
    main()
