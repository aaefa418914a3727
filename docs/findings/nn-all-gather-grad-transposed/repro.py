"""nn-all-gather-grad-transposed: torch.distributed.nn.all_gather gives a transposed input gradient
for a transposed upstream gradient (gloo).

all_gather's backward on gloo is an all-to-all built from dist.scatter calls into
torch.empty_like(upstream gradient), so with a transposed upstream gradient the scatter writes into
transposed buffers, and gloo's scatter ignores strides (gloo-scatter-ignores-strides): the input's
gradient comes back transposed.  One rank is enough to show it (two show the same on every rank).

torch.distributed.nn.all_gather is deprecated (torch 2.13's FutureWarning) in favour of
torch.distributed._functional_collectives.all_gather_single; the script runs that replacement on the same
gradient too, where it exists, and reports its gradient (on 2.13 it is right).  The verdict is about
torch.distributed.nn.all_gather.

    python docs/findings/nn-all-gather-grad-transposed/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...").
"""
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn


def replacement_grad(upstream):
    """What the recommended replacement, _functional_collectives.all_gather_single, gives for the same gradient."""
    import torch.distributed._functional_collectives as fc

    if not hasattr(fc, "all_gather_single"):
        return "this torch has no _functional_collectives.all_gather_single"
    x = torch.zeros(2, 2, requires_grad=True)
    try:
        fc.wait_tensor(fc.all_gather_single(x, 0, dist.group.WORLD)).backward(upstream)
    except RuntimeError as exc:
        return f"the replacement all_gather_single raised {' '.join(str(exc).split())[:80]!r}"
    right = "right" if torch.equal(x.grad, upstream) else "wrong too"
    return f"the replacement all_gather_single gave {x.grad.tolist()} ({right})"


def main():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timedelta(seconds=10))
    try:
        x = torch.zeros(2, 2, requires_grad=True)
        (gathered,) = torch.distributed.nn.all_gather(x)  # one rank: one output, equal to x
        upstream = torch.arange(4.0).reshape(2, 2).t()  # [[0, 2], [1, 3]], strides (1, 2)
        gathered.backward(upstream)
        replacement = replacement_grad(upstream)
    finally:
        dist.destroy_process_group()
    # d(sum(gathered * upstream))/dx = upstream: the gathered tensor is x itself.
    if not torch.equal(x.grad, upstream):
        print(f"BUG: upstream gradient {upstream.tolist()} (transposed) gave x.grad {x.grad.tolist()} through "
              f"torch.distributed.nn.all_gather; {replacement}")
        return 1
    print(f"FIXED: upstream gradient {upstream.tolist()} (transposed) gave x.grad {x.grad.tolist()}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
