"""join-zero-joined-shard-stale: in Join's own documented pattern, ``Join([ddp_model, zero_optim])``,
the parameters a joined rank's ZeroRedundancyOptimizer shard holds are stepped with that rank's own
gradients (none, here), not with the gradients the ranks still training all-reduced.

Join's docstring shows ``with Join([model, optim]): for input in inputs: model(input).sum().backward();
optim.step()`` with DDP and ZeRO.  Here rank 0 has no input and rank 1 has one, so the loop runs one
step, on rank 1 alone.  DDP's join hook shadows rank 1's gradient all-reduce on rank 0 (rank 0
contributes zeros) but throws the result away; ZeRO's join hook then runs ``step()`` on rank 0, whose
parameters have no gradient, and broadcasts rank 0's shard unchanged.  The same loop with a plain
``torch.optim.Adam`` on each rank (or the same step computed locally) updates every parameter.

    python docs/findings/join-zero-joined-shard-stale/repro.py

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


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.join import Join
    from torch.distributed.optim import ZeroRedundancyOptimizer as ZeRO
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(1, 1))
    before = [p.detach().clone() for p in model.parameters()]
    optim = ZeRO(model.parameters(), torch.optim.Adam, lr=0.01)
    owner = [optim._param_to_rank[p] for p in model.parameters()]  # which rank's shard holds each
    inputs = [torch.tensor([1.0]) for _ in range(rank)]  # rank 0: no input, rank 1: one
    with Join([model, optim]):
        for inp in inputs:
            loss = model(inp).sum()
            loss.backward()
            optim.step()
    after = [p.detach().clone() for p in model.parameters()]
    # What the step should do, computed locally: rank 1's gradient divided by the initial world size
    # (DDP's default, divide_by_initial_world_size=True), then one Adam step on every parameter.
    reference = torch.nn.Linear(1, 1)
    with torch.no_grad():
        for r, b in zip(reference.parameters(), before):
            r.copy_(b)
    (reference(torch.tensor([1.0])).sum() / world_size).backward()
    torch.optim.Adam(reference.parameters(), lr=0.01).step()
    expected = [p.detach().clone() for p in reference.parameters()]
    results.put((rank, [(name, o, b.item(), a.item(), e.item()) for name, o, b, a, e in
                        zip(("weight", "bias"), owner, before, after, expected)]))
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
        got = dict(answer(results, ranks) for _ in ranks)
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    wrong = [(rank, name, owner, before, after, expected) for rank, rows in sorted(got.items())
             for name, owner, before, after, expected in rows if abs(after - expected) > 1e-6]
    if wrong:
        rank, name, owner, before, after, expected = wrong[0]
        print(f"BUG: Join([ddp, zero]) with 0 inputs on rank 0 and 1 on rank 1: the {name} (in rank {owner}'s "
              f"ZeRO shard) is {after:.7g} on rank {rank} after the step, expected {expected:.7g} (one Adam step "
              f"from {before:.7g} with rank 1's gradient / 2); {len(wrong)} of 4 rank-parameter pairs wrong")
        return 1
    print("FIXED: after Join([ddp, zero]), every parameter on every rank took the step computed locally")
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
