"""gloo-reduce-scatter-stack-aborts: gloo refuses, or crashes on, the "stack" form of
reduce_scatter_tensor that torch documents as valid.

torch.distributed.reduce_scatter_tensor documents two shapes for its input: the concatenation of
the outputs along dim 0, or their stack, of shape (world_size, *output.shape).  On gloo the stack
form of a 1-d output raises a RuntimeError worded as a failed CHECK ("Check failed:
outputShape[0] * worldSize == inputShape[0]"), and with a 0-d output (input of shape
(world_size,), the only form a scalar output has) the rank process dies of SIGSEGV, with no error.
The ranks run in their own processes so the crash is seen from outside.  torch 2.13 deprecates
reduce_scatter_tensor in favour of reduce_scatter_single, which documents the same two forms (and which
reduce_scatter_tensor calls there): the ranks call reduce_scatter_single where torch has it.

    python docs/findings/gloo-reduce-scatter-stack-aborts/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ..."),
3 when its ranks did not start in time ("NO VERDICT: ...", a busy machine).
"""
import multiprocessing as mp
import queue
import signal
import socket
import sys
import traceback
from datetime import timedelta

STARTUP_S = 300  # bounds the ranks' start-up (importing torch, the rendezvous), which is not part of the bug:
# generous, since on a busy machine it can take minutes; past it the script says NO VERDICT (exit 3)

API = "reduce_scatter_tensor"
CASES = [(2,), ()]  # output shapes; the stacked input is (world_size, *shape), all ones


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    # torch 2.13 deprecates reduce_scatter_tensor for reduce_scatter_single (which it calls): use the
    # replacement where it exists
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    for shape in CASES:
        output = torch.zeros(shape)
        try:
            reduce_scatter(output, torch.ones(world_size, *shape))
            results.put((rank, shape, f"returned {output.tolist()}"))
        except Exception as e:
            results.put((rank, shape, f"raised {str(e).strip()!r}"))
    dist.destroy_process_group()


def api_name():
    """The function the ranks call: reduce_scatter_single where torch has it, else reduce_scatter_tensor."""
    import torch.distributed as dist

    return "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"


def main():
    global API
    API = api_name()
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()  # put() writes at once: a rank that then crashes has still told its outcome
    ranks = [ctx.Process(target=rank_main, args=(r, 2, port, results), daemon=True) for r in range(2)]
    for p in ranks:
        p.start()
    try:
        for p in ranks:
            p.join(timeout=STARTUP_S)  # each case takes milliseconds once the ranks are up
        if any(p.is_alive() for p in ranks):
            raise queue.Empty  # still starting (or stuck) after STARTUP_S: no verdict
    finally:
        for p in ranks:
            p.kill()
    outcomes = {}  # (rank, shape) -> what happened
    while not results.empty():  # every rank is gone: what they wrote is in the pipe
        rank, shape, what = results.get()
        outcomes[rank, shape] = what
    exits = [p.exitcode for p in ranks]
    died = [f"rank {r} died of {signal.Signals(-code).name}" for r, code in enumerate(exits) if code and code < 0]
    expected = {(2,): "returned [2.0, 2.0]", (): "returned 2.0"}
    wrong = [f"output {list(shape)} from input {[2, *shape]}: rank 0 {outcomes.get((0, shape), 'never finished')}"
             for shape in CASES if outcomes.get((0, shape)) != expected[shape]]
    if wrong or died:
        print(f"BUG: {API}'s stack form on gloo: " + "; ".join(wrong + died))
        return 1
    if exits != [0, 0]:
        raise RuntimeError(f"the ranks exited with {exits}")
    print(f"FIXED: the stack form gives the SUM on every rank: {outcomes}")
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
