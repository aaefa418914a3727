"""dtensor-partial-sum-int-becomes-float: int64 Replicate + int64 Partial(sum) gives a float32 DTensor.

On 2 gloo ranks, a = DTensor.from_local(ones(3, int64), [Replicate()]) and b = from_local(ones(3, int64),
[Partial("sum")]); a + b is a float32 Partial(sum) DTensor, where the same addition of the full tensors
(int64 + int64) is int64.  The values are right (3.0), the dtype is not.

    python docs/findings/dtensor-partial-sum-int-becomes-float/repro.py

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
    from torch.distributed.tensor import DTensor, Partial, Replicate

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,))
    a = DTensor.from_local(torch.ones(3, dtype=torch.int64), mesh, [Replicate()], run_check=False)
    b = DTensor.from_local(torch.ones(3, dtype=torch.int64), mesh, [Partial("sum")], run_check=False)
    out = a + b
    full = out.full_tensor()
    if rank == 0:
        results.put((str(out.dtype), str(out.placements), full.tolist()))
    dist.destroy_process_group()


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    mp.start_processes(rank_main, args=(2, port, results), nprocs=2, start_method="spawn")
    dtype, placements, values = results.get(timeout=60)
    if dtype != "torch.int64":
        print(f"BUG: int64 Replicate + int64 Partial(sum) is a {dtype} DTensor {placements} holding {values}; "
              "the local int64 + int64 is int64")
        sys.exit(1)
    print(f"FIXED: the result is {dtype}")


if __name__ == "__main__":
    main()
