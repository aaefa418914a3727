"""gloo-broadcast-size-mismatch-silent: a broadcast of float32[4] from rank 0 into float32[8] on
rank 1 completes on both ranks without an error.

Ranks that pass tensors of different sizes to a collective should get an error.  On gloo this
broadcast returns normally on both ranks, and rank 1's tensor has its first 4 elements overwritten
and the other 4 left as they were.

    python docs/findings/gloo-broadcast-size-mismatch-silent/repro.py

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
    tensor = torch.arange(1.0, 5.0) if rank == 0 else torch.zeros(8)  # [1, 2, 3, 4] into 8 zeros
    try:
        dist.broadcast(tensor, src=0)
        results.put((rank, f"returned {tensor.tolist()}"))
    except Exception as e:
        results.put((rank, f"raised {str(e).strip()!r}"))
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
    if all(what.startswith("returned") for what in got.values()):
        print(f"BUG: broadcast of float32[4] into float32[8] gave no error: rank 1 {got[1]}")
        return 1
    print(f"FIXED: the size mismatch is an error: rank 0 {got[0]}; rank 1 {got[1]}")
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
