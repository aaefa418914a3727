"""A property run under torchrun through TorchrunPool (rank 0 drives, the others execute).

    torchrun --nproc-per-node N tests/helpers/torchrun_prop.py REPORT.json [crash|hang|deadlock|ok] DATABASE_DIR

Writes a JSON report from rank 0 and exits 0 if no failure was found, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from fuzzdist import RankFailure
from fuzzdist.pool import PoolGone, torchrun

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # so ranks can import this module by name


def sum_of_ranks(ctx, n, mode):
    t = torch.full((n,), float(ctx.rank))
    if mode == "crash" and ctx.rank == ctx.world_size - 1 and n >= 50:
        os._exit(7)
    if mode == "hang" and ctx.rank == 1 and n >= 50:
        time.sleep(3600)
    if mode == "deadlock" and ctx.rank == 1 and n >= 50:
        return (float(expected_sum(ctx)), os.getpid(), ctx.rank)  # skips the all_reduce rank 0 waits in
    dist.all_reduce(t, group=ctx.group)
    return (t[0].item(), os.getpid(), ctx.rank)


def expected_sum(ctx):
    return sum(range(ctx.world_size))


def main() -> None:
    report_path, mode, db_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    ctx, store = torchrun.join(timeout=10)
    if ctx.rank != 0:
        sys.exit(torchrun.serve(ctx, store))
    # The hang is planted: its test waits the timeout out, so it is short there (a passing example takes
    # milliseconds); elsewhere generous, for a busy machine.
    pool = torchrun.TorchrunPool(ctx, store, timeout=4 if mode == "hang" else 10)
    report = {"examples": 0, "failure": None, "failure_ranks": None, "pids": None, "world_size": ctx.world_size}
    expected = float(sum(range(ctx.world_size)))

    @settings(max_examples=30, database=DirectoryBasedExampleDatabase(db_dir), deadline=None)
    @given(n=st.integers(1, 100))
    def prop(n):
        out = pool.run(sum_of_ranks, n, mode)
        report["examples"] += 1
        report["pids"] = sorted({pid for _, pid, _ in out})
        assert [v for v, _, _ in out] == [expected] * ctx.world_size
        assert [r for _, _, r in out] == list(range(ctx.world_size))

    code = 0
    try:
        prop()
    except (RankFailure, PoolGone) as exc:
        exc = getattr(exc, "failure", exc)  # PoolGone: the failure that spent the group
        report["failure"] = type(exc).__name__
        report["failure_ranks"] = getattr(exc, "ranks", None)
        report["message"] = str(exc)[:2000]
        report["deadlock"] = getattr(exc, "deadlock", None)
        code = 1
    finally:
        pool.close()
        with open(report_path + ".tmp", "w") as f:
            json.dump(report, f)
        os.replace(report_path + ".tmp", report_path)
    os._exit(code)  # a rank-0 thread may still sit in a collective with a dead peer


if __name__ == "__main__":
    main()
