"""gloo-broadcast-ignores-strides: dist.broadcast on gloo ignores the tensors' strides.

The source sends its tensor's storage in memory order and a receiver writes those bytes into its
own storage in memory order, whatever either tensor's strides.  Here rank 0 broadcasts a transposed
2x2 tensor (values [[0, 2], [1, 3]], memory 0 1 2 3) and rank 1, with a contiguous tensor, ends up
with [[0, 1], [2, 3]].  gloo neither honours the strides nor refuses the tensor.

    python docs/findings/gloo-broadcast-ignores-strides/repro.py

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
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    if rank == 0:
        tensor = torch.arange(4.0).reshape(2, 2).t()  # [[0, 2], [1, 3]], strides (1, 2)
    else:
        tensor = torch.zeros(2, 2)
    dist.broadcast(tensor, src=0)
    results.put((rank, tensor.tolist()))
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
        got = dict(answer(results, ranks) for _ in ranks)
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    sent = [[0.0, 2.0], [1.0, 3.0]]
    if got[1] != sent:
        print(f"BUG: broadcast of rank 0's transposed {sent} left rank 1 with {got[1]}")
        return 1
    print(f"FIXED: rank 1 received rank 0's transposed {sent}")
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
