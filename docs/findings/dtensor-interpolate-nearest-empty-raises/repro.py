"""dtensor-interpolate-nearest-empty-raises: nearest interpolation of an empty DTensor raises a TypeError.

On 2 gloo ranks, x a Replicate (0, 1, 1) float32 DTensor (an empty batch): F.interpolate(x, scale_factor=2.0,
mode="nearest") raises from the sharding propagator (torch 2.13.0: "TypeError: cond must be a bool, but got
<class 'int'>", re-raised as a RuntimeError), where F.interpolate of the local (0, 1, 1) tensor returns a
(0, 1, 2) tensor.  DTensor propagates shapes through the operator's meta function, and the meta function of
aten.upsample_nearest1d passes torch._check an int (``input.numel() != 0 or multiply_integers(...)``) for
every zero-element input.  The same call on a meta tensor raises the same TypeError; mode="linear" on the
same DTensor works.

    python docs/findings/dtensor-interpolate-nearest-empty-raises/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...",
with what the call did instead), 3 when its ranks did not start in time ("NO VERDICT: ...", a busy machine).
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


def outcome_of(call):
    """("returned", shape) or ("raised", "Type: first line of the message")."""
    try:
        return ("returned", tuple(call().shape))
    except Exception as exc:  # noqa: BLE001 - what the call raised is the verdict
        return ("raised", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}")


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    mesh = init_device_mesh("cpu", (world_size,))
    x = DTensor.from_local(torch.ones(0, 1, 1), mesh, [Replicate()], run_check=False)
    local = outcome_of(lambda: F.interpolate(torch.ones(0, 1, 1), scale_factor=2.0, mode="nearest"))
    got = outcome_of(lambda: F.interpolate(x, scale_factor=2.0, mode="nearest").full_tensor())
    # the same call on a meta tensor (no DTensor), and linear mode on the same DTensor, for comparison
    meta = outcome_of(lambda: F.interpolate(torch.ones(0, 1, 1, device="meta"), scale_factor=2.0, mode="nearest"))
    linear = outcome_of(lambda: F.interpolate(x, scale_factor=2.0, mode="linear").full_tensor())
    results.put((rank, got, local, meta, linear))
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
        got = {}
        for _ in ranks:
            rank, outcome, local, meta, linear = answer(results, ranks)
            got[rank] = outcome
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    wrong = sorted(r for r, outcome in got.items() if outcome != local)
    if wrong:
        how, what = got[wrong[0]]
        print(f"BUG: F.interpolate(nearest, scale 2) of a Replicate (0, 1, 1) DTensor {how} {what} (ranks {wrong}); "
              f"of the local tensor it {local[0]} {local[1]}, of a meta tensor it {meta[0]} {meta[1]}, "
              f"in linear mode the DTensor {linear[0]} {linear[1]}")
        return 1
    print(f"FIXED: F.interpolate(nearest, scale 2) of a Replicate (0, 1, 1) DTensor returned shape {got[0][1]}, "
          f"as the local tensor's {local[1]} (a meta tensor: {meta[0]} {meta[1]})")
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
