"""nn-reduce-backward-ignores-op: the backward of torch.distributed.nn.reduce and
torch.distributed.nn.reduce_scatter ignores the forward's op: every rank's input gradient is what SUM's
would be, wrong for MAX and PRODUCT (the ops this script tries; AVG is documented as NCCL-only).

reduce's backward broadcasts the destination's upstream gradient to every rank, and reduce_scatter's
all-gathers the upstream gradients, whatever the op.  Two ranks hold x = 2 and 3.  For
y = reduce(x, dst=0, op) with upstream gradient 1 on rank 0, dy/dx on rank 0 is 0 for MAX (2 is not
the max) and 3 for PRODUCT (2 * 3, differentiated by rank 0's x); torch gives 1 for both.  For
reduce_scatter, rank r's input list is [x_r, x_r] and its output y_r = op over the ranks' entries r,
with upstream gradient 1 on both: rank 0's gradient for its entry 0 is again 0 for MAX and 3 for
PRODUCT; torch gives 1.

torch.distributed.nn.reduce_scatter is deprecated (torch 2.13's FutureWarning) in favour of
torch.distributed._functional_collectives.reduce_scatter_single; the script runs its backward for the same
ops too, where it exists, and reports what it does (on 2.13 it refuses them: "reduce_scatter_tensor
backward only supports 'sum' reduction").  torch.distributed.nn.reduce has no deprecation warning and no
replacement named.  The verdict is about torch.distributed.nn.

    python docs/findings/nn-reduce-backward-ignores-op/repro.py

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

XS = (2.0, 3.0)  # rank 0's and rank 1's x
EXPECTED_RANK0_GRAD = {"MAX": 0.0, "PRODUCT": 3.0}  # d y_0 / d x_0 (for reduce_scatter: of its entry 0)


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import warnings

    import torch
    import torch.distributed as dist
    import torch.distributed.nn

    warnings.simplefilter("ignore", FutureWarning)  # torch.distributed.nn is deprecated, not gone
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    grads, unsupported = {}, None
    for op in EXPECTED_RANK0_GRAD:
        reduce_op = getattr(dist.ReduceOp, op)
        x = torch.tensor([XS[rank]], requires_grad=True)
        y = torch.distributed.nn.reduce(x, 0, op=reduce_op)
        (grads[f"reduce {op}"],) = torch.autograd.grad(y, x, torch.ones(1))
        xs = [torch.tensor([XS[rank]], requires_grad=True) for _ in range(world_size)]
        try:
            y = torch.distributed.nn.reduce_scatter(torch.empty(1), xs, op=reduce_op)
        except RuntimeError as exc:  # older torch: "ProcessGroupGloo does not support reduce_scatter"
            unsupported = " ".join(str(exc).split())[:80]
            continue
        grads[f"reduce_scatter {op}"] = torch.autograd.grad(y, xs, torch.ones(1))[0]
    replacement = {}  # reduce_scatter's recommended replacement, where this torch has it
    import torch.distributed._functional_collectives as fc

    for op in EXPECTED_RANK0_GRAD:
        if not hasattr(fc, "reduce_scatter_single"):
            break
        x = torch.tensor([XS[rank]] * world_size, requires_grad=True)
        try:
            y = fc.wait_tensor(fc.reduce_scatter_single(x, op.lower(), 0, dist.group.WORLD))
            (grad,) = torch.autograd.grad(y, x, torch.ones(1))
            replacement[op] = grad[0].item()
        except RuntimeError as exc:
            replacement[op] = "raised " + repr(" ".join(str(exc).split())[:70])
    results.put((rank, ({k: v.item() for k, v in grads.items()}, replacement, unsupported)))
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
    got = {rank: grads for rank, (grads, _, _) in both.items()}
    unsupported = both[0][2]
    replacement = both[0][1]
    if replacement:
        instead = "; the replacement _functional_collectives.reduce_scatter_single: " + ", ".join(
            f"{op} {what}" for op, what in replacement.items())
    else:
        instead = "; this torch has no _functional_collectives.reduce_scatter_single"
    if unsupported:
        instead = f"; reduce_scatter not tried: {unsupported}" + instead
    wrong = [f"{name} {got[0][name]} (expected {EXPECTED_RANK0_GRAD[name.split()[1]]})" for name in got[0]
             if got[0][name] != EXPECTED_RANK0_GRAD[name.split()[1]]]
    if wrong:
        print("BUG: rank 0's input gradient of y_0 (x = 2 on rank 0, 3 on rank 1, upstream gradient 1): "
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
