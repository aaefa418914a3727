"""gloo-all-reduce-size-mismatch-hangs: all_reduce of float32[1] on rank 0 and float32[3] on rank 1:
rank 0 returns a value, rank 1 waits until the group's timeout.

Ranks that all_reduce tensors of different sizes should both get an error.  On gloo, with these two
sizes, rank 0's all_reduce returns (holding 1 + 2 = 3, its element plus rank 1's first) and rank 1's
never completes: it waits for data that never comes until the process group's timeout (then raises
"Timed out waiting ... for send operation to complete"), or until rank 0's process exits.  Other size
pairs behave differently again ([1] vs [2]: both ranks time out; [5] vs [6]: one rank aborts with
gloo::EnforceNotMet).  The ranks run in their own processes with a 300 s timeout; rank 0 stays alive
after its call, as a training job would, and this script looks from outside whether rank 1's call
has ended 3 s after rank 0's returned.

    python docs/findings/gloo-all-reduce-size-mismatch-hangs/repro.py

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

BOUND_S = 3  # at least; longer where the ranks were slow to start (a busy machine), see main()
SIZES = {0: 1, 1: 3}  # rank -> numel of its float32 tensor


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    tensor = torch.full((SIZES[rank],), float(rank + 1))  # rank 0: [1.], rank 1: [2., 2., 2.]
    try:
        dist.all_reduce(tensor)
        results.put((rank, f"returned {tensor.tolist()}"))
    except Exception as e:
        results.put((rank, f"raised {str(e).strip()!r}"))
    time.sleep(STARTUP_S)  # stay connected, as a real job would; the script kills this process


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
    got = {}
    bound = BOUND_S
    try:
        started = time.monotonic()
        rank, what = answer(results, ranks)  # the first call to end
        got[rank] = what
        # the other rank gets as long again as a half of the start-up took (the rank is descheduled on a
        # busy machine), but well under the group's timeout, which is what it waits for while the bug is there
        bound = min(60.0, max(BOUND_S, (time.monotonic() - started) / 2))
        try:
            rank, what = results.get(timeout=bound)
            got[rank] = what
        except queue.Empty:
            pass
    finally:
        for p in ranks:
            p.kill()
    calls = {r: f"rank {r}'s all_reduce of float32[{SIZES[r]}]" for r in SIZES}
    if len(got) == 1:
        (done,) = got
        print(f"BUG: {calls[done]} {got[done]}; {calls[1 - done]} was still waiting {bound:.0f} s later")
        return 1
    if any(what.startswith("returned") for what in got.values()):
        print("BUG: mismatched sizes gave no error: " + "; ".join(f"{calls[r]} {got[r]}" for r in sorted(got)))
        return 1
    print("FIXED: both ranks raised: " + "; ".join(f"{calls[r]} {got[r]}" for r in sorted(got)))
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
