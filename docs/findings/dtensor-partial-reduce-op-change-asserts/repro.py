"""dtensor-partial-reduce-op-change-asserts: Partial(sum).add_(Partial(max)) raises a bare AssertionError.

On 2 gloo ranks, x = from_local(ones(()), [Partial("sum")]), y = from_local(ones(()), [Partial("max")]):
x + y works (y is reduced first), but x.add_(y) raises AssertionError "Redistribution from one partial
type (P(max)) to another (P(sum)) is unsupported" instead of reducing y or refusing with the in-place
error DTensor gives elsewhere.

    python docs/findings/dtensor-partial-reduce-op-change-asserts/repro.py

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
    from torch.distributed.tensor import DTensor, Partial

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,))
    x = DTensor.from_local(torch.ones(()), mesh, [Partial("sum")], run_check=False)
    y = DTensor.from_local(torch.ones(()), mesh, [Partial("max")], run_check=False)
    try:
        x.add_(y)
        outcome = "ok"
    except AssertionError as exc:
        outcome = f"AssertionError: {exc}"
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
    if outcome.startswith("AssertionError"):
        print(f"BUG: Partial(sum).add_(Partial(max)) raised {outcome}")
        sys.exit(1)
    print(f"FIXED: {outcome}")

if __name__ == "__main__":
    main()
