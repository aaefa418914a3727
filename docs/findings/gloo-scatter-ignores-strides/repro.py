"""gloo-scatter-ignores-strides: dist.scatter on gloo ignores the tensors' strides.

gloo copies the bytes of each scattered tensor in memory order into the receiver's storage in memory
order, whatever the strides of either: scattering the contiguous [[0, 1], [2, 3]] into a transposed
output leaves it holding [[0, 2], [1, 3]], and a transposed input arrives transposed back.  gloo
neither honours the strides nor refuses the tensors.  One rank is enough to show it (two show the
same on every rank).

    python docs/findings/gloo-scatter-ignores-strides/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...").
"""
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timedelta(seconds=10))
    try:
        sent = torch.arange(4.0).reshape(2, 2)  # [[0, 1], [2, 3]]
        into_transposed = torch.zeros(2, 2).t()  # strides (1, 2)
        dist.scatter(into_transposed, [sent], src=0)
        from_transposed = torch.zeros(2, 2)
        dist.scatter(from_transposed, [sent.t().contiguous().t()], src=0)  # same values, strides (1, 2)
    finally:
        dist.destroy_process_group()
    wrong = []
    if not torch.equal(into_transposed, sent):
        wrong.append(f"into a transposed output {into_transposed.tolist()}")
    if not torch.equal(from_transposed, sent):
        wrong.append(f"from a transposed input {from_transposed.tolist()}")
    if wrong:
        print(f"BUG: scatter of {sent.tolist()} arrived " + "; ".join(wrong))
        return 1
    print(f"FIXED: scatter of {sent.tolist()} arrived intact into a transposed output and from a transposed input")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
