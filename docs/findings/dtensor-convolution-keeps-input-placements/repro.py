"""dtensor-convolution-keeps-input-placements: DTensor's convolution gives its output the input's placements
whatever the weight's, so a Partial(sum) or sharded weight gives a wrong result, with no error.

On 2 gloo ranks, x = [[[1, 2, 3]]] Replicate and the weight w = [[[1, 1]]] as Partial(sum) (rank 0 holds
0.25 * w, rank 1 0.75 * w): torch.nn.functional.conv1d(x, w) is [[[3, 5]]] locally.  DTensor's rule for
aten.convolution.default (``convolution_rules`` in torch/distributed/tensor/_ops/_conv_ops.py) builds the
output spec from the input's dim map and pending sums alone, so the output is said Replicate while each
rank holds the convolution with its own piece of w.  The same holds for a weight sharded by output
channels (each rank's output has its channels only, said to be all of them).

    python docs/findings/dtensor-convolution-keeps-input-placements/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...",
with what the calls did instead), 3 when its ranks did not start in time ("NO VERDICT: ...", a busy machine).
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
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    x = DTensor.from_local(torch.tensor([[[1.0, 2.0, 3.0]]]), mesh, [Replicate()], run_check=False)
    piece = torch.ones(1, 1, 2) * (0.25 if rank == 0 else 0.75)
    w = DTensor.from_local(piece, mesh, [Partial("sum")], run_check=False)
    out = F.conv1d(x, w)
    results.put((rank, out.full_tensor().flatten().tolist(), str(out.placements)))
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
            rank, values, placed = answer(results, ranks)
            got[rank] = (values, placed)
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    want = [3.0, 5.0]  # conv1d([[[1, 2, 3]]], [[[1, 1]]]): sums of neighbours
    said = "; ".join(f"rank {r}: conv1d(x, w) gives {v} placed {p}" for r, (v, p) in sorted(got.items()))
    if any(v != want for v, _ in got.values()):
        print(f"BUG: with x Replicate and w Partial(sum), {said}, where {want} is right")
        return 1
    print(f"FIXED: {said}, as {want} locally")
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
