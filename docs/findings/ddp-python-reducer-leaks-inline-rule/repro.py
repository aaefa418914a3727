"""ddp-python-reducer-leaks-inline-rule: once one DistributedDataParallel module has been built under
``torch._dynamo.config.optimize_ddp="python_reducer"`` (the mode compiled autograd needs), every DDP module
compiled later in the process with ``find_unused_parameters=True`` fails in backward, even after
``torch._dynamo.reset()``.

DDP's constructor, under the Python reducer, adds ``torch.nn.parallel.distributed`` to Dynamo's
``trace_rules.LEGACY_MOD_INLINELIST`` (and sets Inductor's ``_fuse_ddp_communication``), process-wide, and nothing
removes it.  ``torch._dynamo.reset()`` documents that it restores Dynamo's initial state "*as if* you had started
a fresh process invocation", but the rule stays.  From then on Dynamo inlines DDP's own ``forward`` under the
default DDPOptimizer mode too, and the ``_DDPSink`` autograd function it traces for ``find_unused_parameters``
keeps the module where DDP passed ``weakref.ref(module)``: its backward calls ``ctx.ddp_weakref()``, which runs
the module's ``forward`` with no input, and raises ``TypeError``.  Two gloo ranks compile
``DDP(nn.Linear(2, 1), find_unused_parameters=True)`` with ``backend="aot_eager"`` and run one step (the
control, which trains), build one DDP module under the Python reducer (not even run), call
``torch._dynamo.reset()``, and run the same compiled step again.

    python docs/findings/ddp-python-reducer-leaks-inline-rule/repro.py

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

STARTUP_S = 300  # bounds the ranks' start-up (importing torch, the rendezvous) and the first compile, which are
# not part of the bug: generous, since on a busy machine it can take minutes; past it the script says NO VERDICT

WORLD_SIZE = 2


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))

    def compiled_step():
        """weight.grad after one compiled step of DDP(nn.Linear(2, 1), find_unused_parameters=True), or the error
        raised."""
        torch._dynamo.reset()  # Dynamo's state as in a fresh process, as reset() documents
        torch.manual_seed(0)
        model = nn.Linear(2, 1)
        ddp = DDP(model, find_unused_parameters=True)
        try:
            torch.compile(ddp, backend="aot_eager")(torch.full((1, 2), 1.0 + rank)).sum().backward()
        except Exception as exc:  # noqa: BLE001 - the bug's exception, reported with its type
            return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
        return model.weight.grad.tolist(), None

    seen = {"before": compiled_step()}
    dist.barrier()
    with torch._dynamo.config.patch(optimize_ddp="python_reducer"):
        DDP(nn.Linear(2, 1))  # built, never run
    seen["inline rule"] = "torch.nn.parallel.distributed" in torch._dynamo.trace_rules.LEGACY_MOD_INLINELIST
    seen["after"] = compiled_step()
    seen["inline rule after reset"] = (
        "torch.nn.parallel.distributed" in torch._dynamo.trace_rules.LEGACY_MOD_INLINELIST
    )
    results.put((rank, seen))
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
    ranks = [ctx.Process(target=rank_main, args=(r, WORLD_SIZE, port, results), daemon=True)
             for r in range(WORLD_SIZE)]
    for p in ranks:
        p.start()
    try:
        got = dict(answer(results, ranks) for _ in ranks)
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    # the mean over the ranks of d/dw sum(w.x + b), x = (1 + rank) * ones
    expected = [[sum(1.0 + r for r in range(WORLD_SIZE)) / WORLD_SIZE] * 2]
    if got[0]["before"] != (expected, None):
        raise RuntimeError(f"the control (before any Python reducer) went wrong too: {got[0]['before']}")
    wrong = {rank: seen["after"] for rank, seen in sorted(got.items()) if seen["after"] != (expected, None)}
    if wrong:
        rank, (grad, error) = next(iter(wrong.items()))
        what = f"raised {error}" if error else f"weight.grad {grad}"
        print(f"BUG: torch.compile(DDP(model, find_unused_parameters=True)) (aot_eager), after one DDP module was "
              f"built under optimize_ddp='python_reducer' and torch._dynamo.reset(): rank {rank} {what} (ranks "
              f"{sorted(wrong)} of {WORLD_SIZE}); before it, weight.grad {got[0]['before'][0]}; DDP's module still in "
              f"Dynamo's inline list after reset: {got[0]['inline rule after reset']}")
        return 1
    print(f"FIXED: a DDP module built under the Python reducer leaves later compiled DDP training as it was: "
          f"weight.grad {expected}")
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
