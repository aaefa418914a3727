"""tp-colwise-empty-shard-step-fails: a ColwiseParallel nn.Linear with fewer output features than the
mesh has ranks (so some rank's Shard(0) piece is empty) gets Replicate() gradients for its Shard(0)
parameters, and the optimizer's in-place update of the parameter then raises.

On 2 ranks, nn.Linear(1, 1) parallelised with ColwiseParallel(): weight and bias are DTensors placed
Shard(0) (rank 0 holds the row, rank 1 an empty piece, torch.chunk semantics).  Forward and backward
give the right values, but weight.grad and bias.grad come back placed Replicate(), and
torch.optim.SGD(...).step() raises "aten.add_.Tensor: in-place operations that require placement
changes are not supported".  With nn.Linear(1, 2) (one row per rank) the gradients are Shard(0) and
the step works.  Nothing in ColwiseParallel's or parallelize_module's documentation requires the
output features to be at least the mesh size, and distribute_tensor documents uneven shards.

    python docs/findings/tp-colwise-empty-shard-step-fails/repro.py

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

WORLD_SIZE = 2


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    seen = {}
    for out_features in (1, 2):  # 1: rank 1's piece is empty; 2: one row per rank
        torch.manual_seed(0)
        model = parallelize_module(nn.Linear(1, out_features), mesh, ColwiseParallel())
        model(torch.ones(1, 1)).sum().backward()
        grads = {name: str(tuple(p.grad.placements)) for name, p in model.named_parameters()}
        params = {name: str(tuple(p.placements)) for name, p in model.named_parameters()}
        try:
            torch.optim.SGD(model.parameters(), lr=0.1).step()
            error = None
        except RuntimeError as exc:
            error = str(exc).splitlines()[0]
        seen[out_features] = (params, grads, error)
    results.put((rank, seen))
    dist.barrier()
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
    ranks = [ctx.Process(target=rank_main, args=(r, WORLD_SIZE, port, results), daemon=True)
             for r in range(WORLD_SIZE)]
    for p in ranks:
        p.start()
    try:
        got = dict(answer(results, ranks) for _ in ranks)
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    params, grads, error = got[0][1]
    if error is not None or any(got[r][1][2] is not None for r in got):
        print(f"BUG: ColwiseParallel nn.Linear(1, 1) on {WORLD_SIZE} ranks: parameters {params}, gradients {grads}; "
              f"SGD step raised: {error}")
        return 1
    print(f"FIXED: ColwiseParallel nn.Linear(1, 1) on {WORLD_SIZE} ranks: parameters {params}, gradients {grads}, "
          "and the SGD step works")
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
