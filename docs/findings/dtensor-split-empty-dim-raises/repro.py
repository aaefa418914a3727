"""dtensor-split-empty-dim-raises: torch.split of a DTensor along a dim of size 0 raises.

On 2 gloo ranks, x a Replicate (0,) float32 DTensor: torch.split(x, 1) raises from the sharding propagator
(torch 2.13.0: "`output_specs` has 0 outputs which does not equal the number of op outputs 1"), where
torch.split of the local (0,) tensor returns one empty tensor.  DTensor's split strategy counts the pieces
as size // split_size (+1 for a remainder), which is 0 for an empty dim; aten returns one piece.
torch.chunk, torch.tensor_split and split with a list of sizes on the same DTensor work.

    python docs/findings/dtensor-split-empty-dim-raises/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...",
with what the call did instead), 3 when its ranks did not start in time ("NO VERDICT: ...", a busy machine).
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
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    x = DTensor.from_local(torch.ones(0), mesh, [Replicate()], run_check=False)
    local = [tuple(t.shape) for t in torch.split(torch.ones(0), 1)]
    try:
        outcome = ("returned", [tuple(t.shape) for t in torch.split(x, 1)])
    except Exception as exc:  # noqa: BLE001 - what the call raised is the verdict
        outcome = ("raised", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}")
    chunked = [tuple(t.shape) for t in torch.chunk(x, 1)]  # the same pieces another way, for comparison
    results.put((rank, outcome, local, chunked))
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
        got = {}
        for _ in ranks:
            rank, outcome, local, chunked = answer(results, ranks)
            got[rank] = outcome
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    wrong = sorted(r for r, outcome in got.items() if outcome != ("returned", local))
    if wrong:
        how, what = got[wrong[0]]
        print(f"BUG: torch.split of a Replicate (0,) DTensor {how} {what} (ranks {wrong}); "
              f"torch.split of the local (0,) tensor returned pieces {local}, torch.chunk of the DTensor {chunked}")
        return 1
    print(f"FIXED: torch.split of a Replicate (0,) DTensor returned pieces {got[0][1]}, as the local tensor's {local}")
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
