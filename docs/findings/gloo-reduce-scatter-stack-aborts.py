"""gloo-reduce-scatter-stack-aborts: gloo refuses, or crashes on, the "stack" form of
reduce_scatter_tensor that torch documents as valid.

torch.distributed.reduce_scatter_tensor documents two shapes for its input: the concatenation of
the outputs along dim 0, or their stack, of shape (world_size, *output.shape).  On gloo the stack
form of a 1-d output raises a RuntimeError worded as a failed CHECK ("Check failed:
outputShape[0] * worldSize == inputShape[0]"), and with a 0-d output (input of shape
(world_size,), the only form a scalar output has) the rank process dies of SIGSEGV, with no error.
The ranks run in their own processes so the crash is seen from outside.

    python docs/findings/gloo-reduce-scatter-stack-aborts.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...").
"""
import multiprocessing as mp
import queue
import signal
import socket
import sys
import traceback
from datetime import timedelta

CASES = [(2,), ()]  # output shapes; the stacked input is (world_size, *shape), all ones


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=10))
    for shape in CASES:
        output = torch.zeros(shape)
        try:
            dist.reduce_scatter_tensor(output, torch.ones(world_size, *shape))
            results.put((rank, shape, f"returned {output.tolist()}"))
        except Exception as e:
            results.put((rank, shape, f"raised {str(e).strip()!r}"))
    dist.destroy_process_group()


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
        for p in ranks:
            p.join(timeout=30)
    finally:
        for p in ranks:
            p.kill()
    outcomes = {}  # (rank, shape) -> what happened
    while True:
        try:
            rank, shape, what = results.get(timeout=1)
        except queue.Empty:
            break
        outcomes[rank, shape] = what
    exits = [p.exitcode for p in ranks]
    died = [f"rank {r} died of {signal.Signals(-code).name}" for r, code in enumerate(exits) if code and code < 0]
    expected = {(2,): "returned [2.0, 2.0]", (): "returned 2.0"}
    wrong = [f"output {list(shape)} from input {[2, *shape]}: rank 0 {outcomes.get((0, shape), 'never finished')}"
             for shape in CASES if outcomes.get((0, shape)) != expected[shape]]
    if wrong or died:
        print("BUG: reduce_scatter_tensor's stack form on gloo: " + "; ".join(wrong + died))
        return 1
    if exits != [0, 0]:
        raise RuntimeError(f"the ranks exited with {exits}")
    print(f"FIXED: the stack form gives the SUM on every rank: {outcomes}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
