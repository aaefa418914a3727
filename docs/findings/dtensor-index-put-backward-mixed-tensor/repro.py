"""dtensor-index-put-backward-mixed-tensor: the backward of index_put (accumulate=False) on DTensors raises.

On 2 gloo ranks, x a Replicate (3,) float32 DTensor that requires grad, index a Replicate (0,) int64 DTensor and
values a Replicate (0,) float32 DTensor: torch.index_put(x, (index,), values).sum().backward() raises
(torch 2.13.0: "aten.index_put.default got mixed torch.Tensor and DTensor"), where the same on the local tensors
gives x the gradient ones(3).  Autograd's IndexPutBackward0 computes x's gradient as
grad.index_put(indices, values_info.zeros(), false), and values_info.zeros() is a plain tensor.  DTensor
accepts a plain tensor of one element as Replicate, so values of one element work; accumulate=True (whose
gradient is grad itself) works too.

    python docs/findings/dtensor-index-put-backward-mixed-tensor/repro.py

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
    import warnings

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    # the one-value comparison makes DTensor warn that it takes a plain one-element tensor as Replicate
    warnings.filterwarnings("ignore", message="Found a non-scalar tensor with numel=1")

    def grad_of_x(n, accumulate, distributed):
        """x's gradient (as a list) after index_put of n values into a (3,) x and a sum's backward, or what
        the backward raised."""
        x, index, values = torch.zeros(3), torch.arange(n), torch.ones(n)
        if distributed:
            x, index, values = (DTensor.from_local(t, mesh, [Replicate()], run_check=False) for t in (x, index, values))
        x.requires_grad_()
        out = torch.index_put(x, (index,), values, accumulate=accumulate)
        try:
            out.sum().backward()
        except Exception as exc:  # noqa: BLE001 - what the backward raised is the verdict
            return f"raised {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
        grad = x.grad.full_tensor() if distributed else x.grad
        return grad.tolist()

    outcome = grad_of_x(0, False, True)
    local = grad_of_x(0, False, False)
    others = {"one value": grad_of_x(1, False, True), "accumulate=True": grad_of_x(0, True, True)}
    results.put((rank, outcome, local, others))
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
            rank, outcome, local, others = answer(results, ranks)
            got[rank] = outcome
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    wrong = sorted(r for r, outcome in got.items() if outcome != local)
    if wrong:
        print(f"BUG: index_put of no values into a Replicate (3,) DTensor x, then backward: {got[wrong[0]]} "
              f"(ranks {wrong}); on the local tensors x's gradient is {local}; on the DTensors with one value "
              f"x's gradient is {others['one value']}, with accumulate=True {others['accumulate=True']}")
        return 1
    print(f"FIXED: index_put of no values into a Replicate (3,) DTensor x, then backward: x's gradient is "
          f"{got[0]}, as on the local tensors")
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
