"""pipelining-static-args-no-grad: a PipelineStage given its shapes up front (``input_args`` and
``output_args``) by example tensors that don't require grad trains with wrong gradients: no gradient
passes between the stages, and the first stage backpropagates a gradient of ones instead (or fails).

``PipelineStage``'s docstring documents ``input_args`` as "Example input tensors" and ``output_args`` as
"Example output tensors", given up front in its "Static mode"; nothing there about ``requires_grad``.
Two gloo ranks split ``nn.Sequential(nn.Linear(w, w), nn.Linear(w, w))`` into two stages, each built
with ``input_args=torch.zeros(1, w)`` and ``output_args=torch.zeros(1, w)``, and run one
``ScheduleGPipe`` step (one micro-batch, MSE loss).  Stage 0's gradients should be the unsplit
model's.  With ``w = 1`` they are those of ``stage0(x).sum()`` (the implicit gradient of ones of a
one-element output), silently; with ``w = 2`` stage 0's backward raises "Failed to run stage
backward" (Output gradient: None).  The same stages built from example tensors that require grad
(as the activations do at run time) get the right gradients.

    python docs/findings/pipelining-static-args-no-grad/repro.py

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

WORLD_SIZE = 2


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    seen = {}
    # requires_grad of the example tensors: as the activations at run time (control), or plain zeros
    for name, width, grad in (("control", 1, True), ("plain-1", 1, False), ("plain-2", 2, False)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(width, width), nn.Linear(width, width))
        x, y = torch.ones(1, width), torch.full((1, width), 2.0)
        reference = nn.Sequential(nn.Linear(width, width), nn.Linear(width, width))
        reference.load_state_dict(model.state_dict())
        nn.functional.mse_loss(reference(x), y).backward()  # the unsplit model's gradients
        example_in = torch.zeros(1, width, requires_grad=grad and rank > 0)  # stage 0's input is the batch
        example_out = torch.zeros(1, width, requires_grad=grad)
        stage = PipelineStage(model[rank], rank, world_size, torch.device("cpu"),
                              input_args=example_in, output_args=example_out)
        schedule = ScheduleGPipe(stage, 1, loss_fn=nn.functional.mse_loss)
        try:
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=y, losses=[])
            error = None
        except RuntimeError as exc:
            error = " ".join(str(exc).split())[:200]
        seen[name] = (model[rank].weight.grad.flatten().tolist() if model[rank].weight.grad is not None else None,
                      reference[rank].weight.grad.flatten().tolist(), error)
        dist.barrier()
    results.put((rank, seen))
    dist.destroy_process_group()


def _close(a, b):
    if a is None or len(a) != len(b):
        return False
    return all(abs(p - q) <= 1e-5 * max(1.0, abs(q)) for p, q in zip(a, b, strict=True))


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
    control, plain1, plain2 = (got[0][name] for name in ("control", "plain-1", "plain-2"))
    if not _close(control[0], control[1]) or control[2] is not None:
        raise RuntimeError(f"the control (example tensors that require grad) went wrong too: {control}")
    if not _close(plain1[0], plain1[1]) or plain2[2] is not None or not _close(plain2[0], plain2[1]):
        print(f"BUG: PipelineStage with plain static example tensors, 2 stages, ScheduleGPipe: stage 0's "
              f"weight.grad is {plain1[0]} for Linear(1, 1) stages (expected {plain1[1]}, as with example "
              f"tensors that require grad); for Linear(2, 2) stages stage 0 raised: {plain2[2]}")
        return 1
    print("FIXED: PipelineStage with plain static example tensors gives stage 0 the unsplit model's gradients")
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
