"""dtensor-view-empty-to-1d-hangs: viewing a DTensor with a size-0 dim as (0,) never returns.

On 1 gloo rank, x = DTensor.from_local(torch.empty(0, 3), mesh, [Replicate()]), then x.view(0): DTensor's
sharding propagation for the view (view_groups, torch/distributed/tensor/_ops/_view_ops.py) loops forever
once the size-0 dim has matched the target's 0 and the input's size-3 dim is left with no target dim to
match, so the call never returns; plain torch.empty(0, 3).view(0) returns a (0,) tensor.  The rank runs
in its own process; this script looks from outside whether its call has ended 10 s (or longer on a busy
machine, see main()) after it started.  A call that returns another shape than (0,), or raises, is a bug
too.

    python docs/findings/dtensor-view-empty-to-1d-hangs/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ..."),
3 when its rank did not start in time ("NO VERDICT: ...", a busy machine).
"""
import multiprocessing as mp
import queue
import socket
import sys
import time
import traceback
from datetime import timedelta

STARTUP_S = 300  # bounds the rank's start-up (importing torch, the rendezvous), which is not part of the bug:
# generous, since on a busy machine it can take minutes; past it the script says NO VERDICT (exit 3)

BOUND_S = 10  # at least; longer where the rank was slow to start (a busy machine), see main()
FROM_SHAPE = (0, 3)
TO_SHAPE = (0,)


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank process only: the parent just starts it and compares.
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    local = torch.empty(*FROM_SHAPE)
    x = DTensor.from_local(local, mesh, [Replicate()])
    # what plain torch does with the same tensor, and a sign that the call below has started
    results.put(("torch", f"returned shape {tuple(local.view(*TO_SHAPE).shape)}"))
    try:
        results.put(("dtensor", f"returned shape {tuple(x.view(*TO_SHAPE).shape)}"))
    except Exception as exc:  # noqa: BLE001 - what the call raised is the verdict
        results.put(("dtensor", f"raised {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"))


def answer(results, ranks, timeout=STARTUP_S):
    """The next result from the rank.  A rank that died (an exception, a signal) without answering is an error
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
    ranks = [ctx.Process(target=rank_main, args=(0, 1, port, results), daemon=True)]
    for p in ranks:
        p.start()
    got = {}
    bound = BOUND_S
    try:
        started = time.monotonic()
        which, what = answer(results, ranks)  # plain torch's answer: the DTensor call starts right after it
        got[which] = what
        # the call gets as long again as a half of the start-up took (the rank is descheduled on a busy
        # machine), at most 60 s: a view of an empty tensor takes milliseconds
        bound = min(60.0, max(BOUND_S, (time.monotonic() - started) / 2))
        try:
            which, what = answer(results, ranks, timeout=bound)
            got[which] = what
        except queue.Empty:
            pass
    finally:
        for p in ranks:
            p.kill()
    call = f"DTensor (Replicate, 1 rank) of shape {FROM_SHAPE} .view{TO_SHAPE}"
    plain = f"plain torch {got['torch']}"
    if "dtensor" not in got:
        print(f"BUG: {call} was still running {bound:.0f} s after it started; {plain}")
        return 1
    if got["dtensor"] != got["torch"]:
        print(f"BUG: {call} {got['dtensor']}; {plain}")
        return 1
    print(f"FIXED: {call} {got['dtensor']}, as plain torch does")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except queue.Empty:  # a wait that is not part of the bug ran out: a slow machine, not a verdict
        print(f"NO VERDICT: the rank did not answer within {STARTUP_S} s of starting (a busy machine?); "
              "run it again on a quieter one")
        sys.exit(3)
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
