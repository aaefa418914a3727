"""gloo-p2p-second-wait-blocks: a second wait() on a completed gloo send/recv Work blocks until the
process group's timeout, then raises.

Rank 0 isends a tensor to rank 1, which irecvs it; both wait() on their Work, which returns.  A
second wait() on the same, completed, Work should return at once (it does for a collective's Work);
on gloo it blocks until the group's timeout and then raises "Timed out waiting ... for send/recv
operation to complete".  The ranks run in their own processes with a 60 s timeout, and this script
looks from outside whether their second wait() returned within 3 s.

    python docs/findings/gloo-p2p-second-wait-blocks.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...").
"""
import multiprocessing as mp
import queue
import socket
import sys
import traceback
from datetime import timedelta

BOUND_S = 3  # a second wait() on a completed Work should take microseconds


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    tensor = torch.ones(2)
    work = dist.isend(tensor, dst=1) if rank == 0 else dist.irecv(tensor, src=0)
    work.wait()
    results.put((rank, "first wait() returned"))
    work.wait()
    results.put((rank, "second wait() returned"))
    dist.destroy_process_group()


def main():
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    ranks = [ctx.Process(target=rank_main, args=(r, 2, port, results), daemon=True) for r in range(2)]
    for p in ranks:
        p.start()
    seen = []
    try:
        for _ in range(2):
            seen.append(results.get(timeout=30))  # both first waits (raises queue.Empty if they never return)
        try:
            for _ in range(2):
                seen.append(results.get(timeout=BOUND_S))
        except queue.Empty:
            pass
    finally:
        for p in ranks:
            p.kill()
    blocked = [f"rank {r} ({'isend' if r == 0 else 'irecv'})" for r in range(2)
               if (r, "second wait() returned") not in seen]
    if blocked:
        print(f"BUG: the second wait() on a completed Work still blocked after {BOUND_S} s on "
              + " and ".join(blocked) + " (the first wait() returned at once)")
        return 1
    print("FIXED: a second wait() on a completed isend/irecv Work returns at once")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
