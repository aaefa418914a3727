"""dtensor-out-placement-mismatch-empty-min: a pointwise out= overload with out Shard(0) raises "min() arg is an
empty sequence".

On 2 gloo ranks, a Replicate (0,) float32 DTensor and o a Shard(0) one:
aten.special_chebyshev_polynomial_t.n_scalar_out(a, 0.5, out=o) raises
RuntimeError wrapping "min() arg is an empty sequence" from the sharding propagator, an error that does
not say what is wrong (out's placement can't be kept).

    python docs/findings/dtensor-out-placement-mismatch-empty-min/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...").
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world_size, port, results):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,))
    a = DTensor.from_local(torch.ones(0), mesh, [Replicate()], run_check=False)
    o = DTensor.from_local(torch.ones(0), mesh, [Shard(0)], run_check=False)
    try:
        torch.ops.aten.special_chebyshev_polynomial_t.n_scalar_out(a, 0.5, out=o)
        outcome = "ok"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    if rank == 0:
        results.put(outcome)
    dist.destroy_process_group()

def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    mp.start_processes(rank_main, args=(2, port, results), nprocs=2, start_method="spawn")
    outcome = results.get(timeout=60)
    if "min() arg is an empty sequence" in outcome:
        print(f"BUG: a pointwise out= overload into a Shard(0) DTensor raised {outcome}")
        sys.exit(1)
    print(f"FIXED: {outcome}")

if __name__ == "__main__":
    main()
