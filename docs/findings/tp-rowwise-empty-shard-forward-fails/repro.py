"""tp-rowwise-empty-shard-forward-fails: a RowwiseParallel nn.Linear with fewer input features than the
mesh has ranks (so some rank's Shard(1) piece of the weight is empty) raises in its forward pass when
its input is replicated.

On 2 ranks, nn.Linear(1, 1) parallelised with RowwiseParallel(input_layouts=Replicate()), on an input
of shape (1, 1, 1): the style redistributes the replicated input to Shard(-1) (rank 1's piece empty)
and the forward raises "This operation would remove or reshape sharded dimension 2, which requires
redistribution. Please redistribute the input first."  With nn.Linear(2, 1) (one input feature per
rank) the forward gives the local model's output.  Nothing in RowwiseParallel's or
parallelize_module's documentation requires the input features to be at least the mesh size, and
distribute_tensor documents uneven shards (torch.chunk semantics).

    python docs/findings/tp-rowwise-empty-shard-forward-fails/repro.py

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
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    seen = {}
    for in_features in (2, 1):  # 2: one input feature per rank (the control); 1: rank 1's piece empty
        torch.manual_seed(0)
        local = nn.Linear(in_features, 1)
        model = parallelize_module(nn.Linear(in_features, 1), mesh, RowwiseParallel(input_layouts=Replicate()))
        with torch.no_grad():  # the same values as the local model, whatever the seed gave
            model.weight.copy_(torch.distributed.tensor.distribute_tensor(local.weight.detach(), mesh,
                                                                          model.weight.placements))
            model.bias.copy_(torch.distributed.tensor.distribute_tensor(local.bias.detach(), mesh,
                                                                        model.bias.placements))
        x = torch.ones(1, 1, in_features)
        try:
            out = model(x)
            ok = bool(torch.allclose(out, local(x)))
            seen[in_features] = ("equal to the local model's" if ok else "not the local model's", None)
        except RuntimeError as exc:
            seen[in_features] = (None, str(exc).splitlines()[0])
        dist.barrier()
    results.put((rank, seen))
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
    control = got[0][2]
    if control[1] is not None or control[0] != "equal to the local model's":
        raise RuntimeError(f"the control (nn.Linear(2, 1)) went wrong too: {control}")
    outcome, error = got[0][1]
    if error is not None or outcome != "equal to the local model's":
        print(f"BUG: RowwiseParallel(input_layouts=Replicate()) nn.Linear(1, 1) on {WORLD_SIZE} ranks: the forward "
              f"{'raised: ' + error if error else 'output is ' + outcome} (nn.Linear(2, 1): {control[0]})")
        return 1
    print(f"FIXED: RowwiseParallel nn.Linear(1, 1) on {WORLD_SIZE} ranks gives the local model's output")
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
