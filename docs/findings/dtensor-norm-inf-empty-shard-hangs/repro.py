"""dtensor-norm-inf-empty-shard-hangs: the inf-norm of a sharded DTensor hangs when a rank's shard is empty.

On 2 gloo ranks, x = DTensor.from_local(piece, mesh, [Shard(0)], shape=(1,)) (rank 0 holds the element,
rank 1 an empty piece, torch.chunk semantics), then torch.linalg.vector_norm(x, inf).full_tensor(): rank 1
raises on its empty piece ("cannot compute the inf norm on an empty tensor"), rank 0 gets a Partial(max)
result and waits in the all-reduce that full_tensor() issues until the process group's timeout.
The ranks run in their own processes with a 300 s timeout; rank 1 stays alive after its call, as a
training job's would, and this script looks from outside whether rank 0's call has ended 10 s (or longer
on a busy machine, see main()) after rank 1's did.  Ranks that end their calls out of step (one raises,
the other returns), or return another value than the inf-norm of the full tensor (1), are a
bug too; ranks that all refuse the call alike are not this one.

    python docs/findings/dtensor-norm-inf-empty-shard-hangs/repro.py

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

BOUND_S = 10  # at least; longer where the ranks were slow to start (a busy machine), see main()
EXPECTED = 1.0  # the inf-norm of the full (1,) tensor of ones


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import math

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    piece = torch.ones(1) if rank == 0 else torch.ones(0)  # torch.chunk's pieces of a (1,) tensor
    x = DTensor.from_local(piece, mesh, [Shard(0)], run_check=False, shape=(1,), stride=(1,))
    try:
        results.put((rank, f"returned {torch.linalg.vector_norm(x, math.inf).full_tensor().item()}"))
    except Exception as exc:  # noqa: BLE001 - what each rank raised is the verdict
        results.put((rank, f"raised {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"))
    time.sleep(STARTUP_S)  # stay connected, as a real job would: its peer's wait never ends; the script kills this


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
    call = "vector_norm(x, inf) of a Shard(0) (1,) DTensor on 2 ranks"
    seen = "; ".join(f"rank {r} {got[r]}" for r in sorted(got))
    if len(got) == 1:
        (waiting,) = {0, 1} - set(got)
        print(f"BUG: {call}: {seen}; rank {waiting} was still waiting {bound:.0f} s later")
        return 1
    if got[0] != got[1]:
        print(f"BUG: {call}: the ranks ended out of step: {seen}")
        return 1
    if got[0].startswith("returned") and got[0] != f"returned {EXPECTED}":
        print(f"BUG: {call}: {seen}; the inf-norm of the full tensor is {EXPECTED}")
        return 1
    print(f"FIXED: {call}: no rank was left waiting: both {got[0]}")
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
