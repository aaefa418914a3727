"""gloo-reduce-scatter-tensor-ignores-op: on torch 2.6.0, gloo's reduce_scatter_tensor reduces with SUM
whatever op it is given.

torch.distributed.reduce_scatter_tensor(output, input, op=ReduceOp.SUM, ...) "Reduces, then scatters";
the list form reduce_scatter documents op as "Specifies an operation used for element-wise
reductions".  On torch 2.6.0's gloo, PRODUCT, MIN and MAX (and AVG, which torch 2.6.0 documents for
NCCL only) all give the sum of the ranks' inputs, with no error; the functional reduce_scatter_tensor
(torch.distributed._functional_collectives), which goes through the same gloo call, gives the sum too.
all_reduce with the same ops is right, for comparison.  torch 2.13 deprecates reduce_scatter_tensor in
favour of reduce_scatter_single: the ranks call that too where torch has it.

    python docs/findings/gloo-reduce-scatter-tensor-ignores-op/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ..."),
3 when its ranks did not start in time ("NO VERDICT: ...", a busy machine).
"""
import multiprocessing as mp
import os
import queue
import socket
import sys
import traceback
from datetime import timedelta

STARTUP_S = 300  # bounds the ranks' start-up (importing torch, the rendezvous), which is not part of the bug:
# generous, since on a busy machine it can take minutes; past it the script says NO VERDICT (exit 3)

INPUTS = {0: [2.0, 3.0], 1: [5.0, 7.0]}  # rank -> its input; rank r gets element r reduced
OPS = ("PRODUCT", "MIN", "MAX", "AVG")
DOCUMENTED_FOR_GLOO = ("PRODUCT", "MIN", "MAX")  # AVG: "only available with the NCCL backend" (ReduceOp)


def expected(op, rank):
    a, b = INPUTS[0][rank], INPUTS[1][rank]
    return {"SUM": a + b, "PRODUCT": a * b, "MIN": min(a, b), "MAX": max(a, b), "AVG": (a + b) / 2}[op]


def rank_main(rank, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import warnings

    import torch
    import torch.distributed as dist

    warnings.simplefilter("ignore", FutureWarning)  # torch 2.13 deprecates reduce_scatter_tensor
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=STARTUP_S))
    calls = {"reduce_scatter_tensor": lambda out, x, op: dist.reduce_scatter_tensor(out, x, op=op)}
    if hasattr(dist, "reduce_scatter_single"):
        calls["reduce_scatter_single"] = lambda out, x, op: dist.reduce_scatter_single(out, x, op=op)
    try:
        import torch.distributed._functional_collectives as fc

        calls["functional reduce_scatter_tensor"] = lambda out, x, op: out.copy_(
            fc.wait_tensor(fc.reduce_scatter_tensor(x, op.lower(), 0, dist.group.WORLD)))
    except ImportError:
        pass
    calls["all_reduce (for comparison)"] = lambda out, x, op: (dist.all_reduce(x, op=op), out.copy_(x[rank:rank + 1]))
    for name, call in calls.items():
        for op in OPS:
            out = torch.zeros(1)
            try:
                given = op if name.startswith("functional") else getattr(dist.ReduceOp, op)  # a name, or the enum
                call(out, torch.tensor(INPUTS[rank]), given)
                results.put((rank, name, op, out.item()))
            except Exception as e:
                results.put((rank, name, op, f"raised {type(e).__name__}: {str(e).strip().splitlines()[0][:100]}"))
    # every outcome is in the pipe (SimpleQueue writes at once); leave without destroy_process_group, which was
    # seen to block on torch 2.6.0 after a peer had gone (not part of this bug)
    os._exit(0)


def main():
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()  # put() writes at once: a rank that then dies has still told what it saw
    ranks = [ctx.Process(target=rank_main, args=(r, port, results), daemon=True) for r in range(2)]
    for p in ranks:
        p.start()
    try:
        for p in ranks:
            p.join(timeout=STARTUP_S)  # each call takes milliseconds once the ranks are up
        if any(p.is_alive() for p in ranks):
            raise queue.Empty  # still starting (or stuck) after STARTUP_S: no verdict
    finally:
        for p in ranks:
            p.kill()
    got = {}  # (rank, call, op) -> the value, or what it raised
    while not results.empty():
        rank, name, op, value = results.get()
        got[rank, name, op] = value
    if [p.exitcode for p in ranks] != [0, 0]:
        raise RuntimeError(f"the ranks exited with {[p.exitcode for p in ranks]}: {got}")
    names = sorted({name for _, name, _ in got}, key=lambda n: (n.startswith("all_reduce"), n))
    sums = []  # (call, op) where every rank got the sum instead
    wrong = []
    for name in names:
        for op in OPS:
            values = [got.get((r, name, op)) for r in range(2)]
            if all(v == expected(op, r) for r, v in enumerate(values)):
                continue
            if all(v == expected("SUM", r) for r, v in enumerate(values)):
                sums.append(f"{name} {op}")
            elif op in DOCUMENTED_FOR_GLOO or not all(isinstance(v, str) for v in values):
                wrong.append(f"{name} {op}: ranks got {values}, expected {[expected(op, r) for r in range(2)]}")
    bug = [s for s in sums if s.split()[-1] in DOCUMENTED_FOR_GLOO]
    if bug:
        extra = [s for s in sums if s not in bug]
        print(f"BUG: gloo reduced with SUM instead of the op given (inputs {INPUTS[0]} and {INPUTS[1]}): "
              + ", ".join(bug) + (f"; also {', '.join(extra)} (AVG: documented for NCCL only)" if extra else "")
              + (f"; other wrong results: {'; '.join(wrong)}" if wrong else ""))
        return 1
    if wrong:
        raise RuntimeError(f"wrong results, but not the sum: {'; '.join(wrong)}")
    print(f"FIXED: every call applied its op ({', '.join(names)}; {', '.join(OPS)})"
          + (f"; AVG still gives the sum in: {', '.join(sums)}" if sums else ""))
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
