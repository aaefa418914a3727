"""dtensor-partial-sum-fill-scales-by-ranks: fill_(v) on a Partial(sum) DTensor gives world_size * v; so
addcdiv's gradient for tensor1 is world_size times too large where tensor2 is Partial(sum).

On 2 gloo ranks, x a Partial(sum) float32 DTensor: x.fill_(-2) keeps Partial(sum) and writes -2 on every
rank, so x.full_tensor() is -4 (DTensor's strategy for aten.fill_.Scalar passes every placement through).
Autograd meets it in addcdiv's backward: value / tensor2 (a Scalar over a Tensor) runs
empty_like(tensor2).fill_(value).div_(tensor2), and empty_like keeps tensor2's Partial(sum).  With a, b
Replicate and c Partial(sum), torch.addcdiv(a, b, c, value=-2) is right, and b's gradient is Partial(sum)
holding world_size * (-2 * grad / c).

    python docs/findings/dtensor-partial-sum-fill-scales-by-ranks/repro.py

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
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    x = DTensor.from_local(torch.ones(2) * (rank == 0), mesh, [Partial("sum")], run_check=False)
    x.fill_(-2.0)
    filled = (x.full_tensor().tolist(), str(x.placements))
    a = DTensor.from_local(torch.ones(2), mesh, [Replicate()], run_check=False)
    b = DTensor.from_local(torch.tensor([3.0, 5.0]), mesh, [Replicate()], run_check=False).requires_grad_()
    c = DTensor.from_local(torch.tensor([4.0, 8.0]) / world_size, mesh, [Partial("sum")], run_check=False)
    out = torch.addcdiv(a, b, c, value=-2)
    (grad_b,) = torch.autograd.grad(out, [b], DTensor.from_local(torch.ones(2), mesh, [Replicate()], run_check=False))
    got = (out.full_tensor().tolist(), grad_b.full_tensor().tolist(), str(grad_b.placements))
    results.put((rank, filled, got))
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
            rank, filled, grads = answer(results, ranks)
            got[rank] = (filled, grads)
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    # local autograd: addcdiv(a, b, c, value=-2) = a - 2 * b / c, so d/db = -2 * grad / c, with c = [4, 8]
    want_fill = [-2.0, -2.0]
    want_out = [1 - 2 * 3 / 4, 1 - 2 * 5 / 8]
    want_grad = [-2 / 4, -2 / 8]
    (fill_values, fill_placed), (out, grad_b, grad_placed) = got[0]
    fill_wrong = fill_values != want_fill
    grad_wrong = grad_b != want_grad or out != want_out
    said = (f"x.fill_(-2) of a Partial(sum) DTensor gives {fill_values} placed {fill_placed} where {want_fill} is right; "
            f"addcdiv(a, b, c, value=-2) with c Partial(sum) gives {out} (right: {want_out}) and b's gradient {grad_b} "
            f"placed {grad_placed} where {want_grad} is right")
    if fill_wrong or grad_wrong:
        print(f"BUG: {said}")
        return 1
    print(f"FIXED: {said}")
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
