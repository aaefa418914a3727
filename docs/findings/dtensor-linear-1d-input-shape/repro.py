"""dtensor-linear-1d-input-shape: F.linear of a 1-D DTensor input gives a DTensor whose shape is (1, out).

On 2 gloo ranks, x = DTensor.from_local(ones(3), [Replicate()]) and w = from_local(ones(2, 3), [Replicate()]);
torch.nn.functional.linear(x, w) is a DTensor whose .shape is (1, 2), while its local tensor and
full_tensor() are (2,), and F.linear of the plain tensors (computed here too) is (2,).

    python docs/findings/dtensor-linear-1d-input-shape/repro.py

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
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    x, w = torch.ones(3), torch.ones(2, 3)
    out = F.linear(DTensor.from_local(x, mesh, [Replicate()]), DTensor.from_local(w, mesh, [Replicate()]))
    full = out.full_tensor()  # a collective: every rank takes part
    plain = F.linear(x, w)  # the same operator on plain tensors
    results.put((rank, tuple(out.shape), tuple(out.to_local().shape), tuple(full.shape), tuple(plain.shape)))
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
            rank, *seen = answer(results, ranks)
            got[rank] = seen
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    wrong = {r: seen for r, seen in got.items() if seen[0] != seen[3]}
    call = "F.linear of a (3,) input and a (2, 3) weight, both Replicate DTensors on 2 ranks"
    if wrong:
        shape, local, full, plain = wrong[min(wrong)]
        print(f"BUG: {call}: the DTensor's shape is {shape} (ranks {sorted(wrong)}), its local tensor's {local}, "
              f"its full_tensor()'s {full}; F.linear of the plain tensors is {plain}")
        return 1
    shape, local, full, plain = got[0]
    print(f"FIXED: {call}: the DTensor's shape is {shape}, as F.linear of the plain tensors")
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
