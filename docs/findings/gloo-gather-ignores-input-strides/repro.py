"""gloo-gather-ignores-input-strides: dist.gather on gloo (torch 2.6.0) sends a non-contiguous input's memory.

gloo's gather copies each rank's input tensor in memory order, whatever its strides: gathering the
transposed tensor whose values are [[0, 1], [2, 3]] (strides (1, 2), memory [0, 2, 1, 3]) leaves the
destination holding [[0, 2], [1, 3]], with no error.  One rank is enough to show it.  The script also
gathers a contiguous input into a transposed output and says what arrived there.

    python docs/findings/gloo-gather-ignores-input-strides/repro.py

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
        values = torch.arange(4.0).reshape(2, 2)  # [[0, 1], [2, 3]]
        transposed_input = values.t().contiguous().t()  # the same values, strides (1, 2)
        from_transposed = [torch.zeros(2, 2)]
        dist.gather(transposed_input, from_transposed, dst=0)
        into_transposed = [torch.zeros(2, 2).t()]  # strides (1, 2)
        dist.gather(values, into_transposed, dst=0)
    finally:
        dist.destroy_process_group()
    output_case = ("into a transposed output it arrived intact" if torch.equal(into_transposed[0], values)
                   else f"into a transposed output it arrived as {into_transposed[0].tolist()}")
    if not torch.equal(from_transposed[0], values):
        print(f"BUG: gather of a transposed input holding {values.tolist()} arrived as "
              f"{from_transposed[0].tolist()} (its memory order); {output_case}")
        return 1
    print(f"FIXED: gather of a transposed input holding {values.tolist()} arrived intact; {output_case}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
