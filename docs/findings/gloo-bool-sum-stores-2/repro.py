"""gloo-bool-sum-stores-2: a SUM over bool tensors on gloo stores the byte 2 in a bool tensor.

gloo adds bools as bytes, so True + True leaves the byte 2 where a bool must hold 0 or 1 (NCCL maps
SUM over bool to MAX).  The torch ops tried read any nonzero byte as True, but the tensor's bytes
are wrong, and whatever reads them sees the 2: .view(torch.uint8), .numpy().view(numpy.uint8),
.numpy().tobytes().  Two ranks each contribute [True] to all_reduce, reduce and the list form of
reduce_scatter (reduce_scatter_tensor gets it right).

    python docs/findings/gloo-bool-sum-stores-2/repro.py

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
    unsupported = []
    all_reduced = torch.tensor([True])
    dist.all_reduce(all_reduced)  # SUM is the default op
    reduced = torch.tensor([True])
    dist.reduce(reduced, dst=0)
    bytes_left = {name: t.view(torch.uint8).item() for name, t in (("all_reduce", all_reduced), ("reduce", reduced))}
    scattered = torch.tensor([False])
    try:
        dist.reduce_scatter(scattered, [torch.tensor([True]) for _ in range(world_size)])
        bytes_left["reduce_scatter"] = scattered.view(torch.uint8).item()
    except RuntimeError as exc:  # older torch: "ProcessGroupGloo does not support reduce_scatter"
        unsupported.append(" ".join(str(exc).split())[:80])
    results.put((rank, bytes_left, unsupported))
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
        got, unsupported = {}, []
        for _ in ranks:
            rank, bytes_left, not_there = answer(results, ranks)
            got[rank] = bytes_left
            unsupported += not_there
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    rank0 = got[0]  # reduce's result is defined on its dst, rank 0
    wrong = {op: byte for op, byte in rank0.items() if byte != 1}
    if wrong:
        print("BUG: SUM of True and True left the byte(s) " + ", ".join(f"{op} {b}" for op, b in wrong.items())
              + " in a bool tensor on rank 0 (a bool holds 0 or 1)"
              + (f"; reduce_scatter not tried: {unsupported[0]}" if unsupported else ""))
        return 1
    print(f"FIXED: SUM of True and True gave a bool holding the byte 1: {rank0}")
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
