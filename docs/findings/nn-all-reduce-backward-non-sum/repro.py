"""nn-all-reduce-backward-non-sum: torch.distributed.nn.all_reduce's backward is wrong for PRODUCT,
MIN and MAX.

Its backward all-reduces the upstream gradients with the forward's op, which is right only for SUM
(AVG, documented as NCCL-only, is not tried here).  Two ranks hold x = 1 and 2 (3 for PRODUCT) and
each computes y = all_reduce(x, op).sum() and y.backward().  The gradient of the total y_0 + y_1
with respect to rank 0's x is 0 for MAX (rank 0's x is not the max), 2 for MIN (it is the min,
counted on both ranks) and 2 * 3 = 6 for PRODUCT; torch gives rank 0 the gradient 1 in all three
(the MAX/MIN/PRODUCT of the upstream 1s).

torch.distributed.nn.all_reduce is deprecated (since torch 2.13's FutureWarning) in favour of
torch.distributed._functional_collectives.all_reduce; the script runs that replacement too, where it
exists, and reports what its backward does for the same ops (on 2.13 it refuses them: "all_reduce backward
only supports 'sum' reduction").  The verdict is about the deprecated API.

    python docs/findings/nn-all-reduce-backward-non-sum/repro.py

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

INPUTS = {"MAX": (1.0, 2.0), "MIN": (1.0, 2.0), "PRODUCT": (2.0, 3.0)}  # op -> (rank 0's x, rank 1's x)
EXPECTED_RANK0_GRAD = {"MAX": 0.0, "MIN": 2.0, "PRODUCT": 6.0}  # d(y_0 + y_1)/dx on rank 0


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist
    import torch.distributed.nn

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    grads = {}
    for op, xs in INPUTS.items():
        x = torch.tensor([xs[rank]], requires_grad=True)
        torch.distributed.nn.all_reduce(x, op=getattr(dist.ReduceOp, op)).sum().backward()
        grads[op] = x.grad.item()
    replacement = {}  # the same with the recommended replacement, where this torch has it
    try:
        import torch.distributed._functional_collectives as fc
    except ImportError:
        fc = None
    for op, xs in INPUTS.items():
        if fc is None or not hasattr(fc, "all_reduce"):
            break
        x = torch.tensor([xs[rank]], requires_grad=True)
        try:
            fc.wait_tensor(fc.all_reduce(x, op.lower(), dist.group.WORLD)).sum().backward()
            replacement[op] = "no gradient" if x.grad is None else x.grad.item()
        except RuntimeError as exc:
            replacement[op] = "raised " + repr(" ".join(str(exc).split())[:70])
    results.put((rank, (grads, replacement)))
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
        both = dict(answer(results, ranks) for _ in ranks)
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    got = {rank: grads for rank, (grads, _) in both.items()}
    replacement = both[0][1]
    wrong = [f"{op} {got[0][op]} (expected {want})" for op, want in EXPECTED_RANK0_GRAD.items() if got[0][op] != want]
    instead = ("; the replacement _functional_collectives.all_reduce: "
               + ", ".join(f"{op} {what}" for op, what in replacement.items())) if replacement else \
        "; this torch has no _functional_collectives.all_reduce"
    if wrong:
        print("BUG: rank 0's input gradient after torch.distributed.nn.all_reduce(x, op).sum().backward(): "
              + ", ".join(wrong) + instead)
        return 1
    print(f"FIXED: rank 0's input gradients are right: {got[0]}")
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
