"""new-group-local-sync-recreate-fails: a group made with new_group(ranks, use_local_synchronization=True),
destroyed, and made again over the same ranks reuses the destroyed group's name and rendezvous keys, so
the new group fails: its all_reduce raises "Connection reset by peer", its construction raises
"Gloo connectFullMesh failed", or a rank hangs past the group's timeout.

new_group names a locally synchronised group sha1(ranks + number of groups that exist now).
destroy_process_group(group) lowers that number again, so the next such group over the same ranks
gets the same name, and the same store prefix, where gloo's rendezvous keys from the destroyed group
are still stored.  A rank that reads its peer's key before the peer has written its new one gets the
peer's old address.  Groups made without use_local_synchronization are named from a counter that
only grows, so they don't collide.

Here 2 ranks make the group, all_reduce over it and destroy it, up to CYCLES times.  Rank 1 starts each
new_group LAG_S later than rank 0 (cycle 0 too, where it does no harm), so rank 0 reads rank 1's key
first.  How the stale key breaks the group depends on the ports the ranks got, so each cycle may fail
another way, and an odd cycle succeeds; the script stops at the first one that fails.

    python docs/findings/new-group-local-sync-recreate-fails/repro.py

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

CYCLES = 8
LAG_S = 0.3  # rank 1 starts each new_group this much later than rank 0
GROUP_TIMEOUT_S = 2  # the new groups' timeout
BOUND_S = GROUP_TIMEOUT_S + 3  # a cycle takes milliseconds; well past the group's timeout it's a hang


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    results.put((rank, None, "ready", None))
    for cycle in range(CYCLES):
        if rank == 1:
            time.sleep(LAG_S)
        step = "new_group"
        try:
            group = dist.new_group([0, 1], timeout=timedelta(seconds=GROUP_TIMEOUT_S),
                                   use_local_synchronization=True)
            step = "all_reduce"
            results.put((rank, cycle, "made", group.group_name))
            tensor = torch.tensor([float(rank + 1)])  # 1 + 2 = 3
            dist.all_reduce(tensor, group=group)
        except Exception as e:
            message = " ".join(str(e).split())
            results.put((rank, cycle, "raised", f"{step} raised {message[:150]!r}"))
            time.sleep(60)  # stay connected; the script kills this process
            return
        results.put((rank, cycle, "reduced", tensor.item()))
        dist.destroy_process_group(group)
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
    seen = {}  # (rank, cycle) -> [(what happened, detail), ...]
    try:
        for _ in ranks:
            answer(results, ranks)  # both ranks up (importing torch takes a while)
        for cycle in range(CYCLES):
            deadline = time.monotonic() + BOUND_S
            while not all(ended(seen.get((r, cycle), [])) for r in range(2)):
                try:
                    rank, c, what, detail = results.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                seen.setdefault((rank, c), []).append((what, detail))
            if not all(seen.get((r, cycle), [])[-1:] == [("reduced", 3.0)] for r in range(2)):
                return verdict_bug(seen, cycle)
    finally:
        for p in ranks:
            p.kill()
    print(f"FIXED: {CYCLES} groups made with new_group([0, 1], use_local_synchronization=True), each destroyed "
          "before the next, all reduced correctly")
    return 0


def ended(events):
    return bool(events) and events[-1][0] in ("raised", "reduced")


def verdict_bug(seen, cycle):
    def said(rank):
        events = seen.get((rank, cycle), [])
        if not ended(events):
            where = "all_reduce" if events else "new_group"
            return f"rank {rank} still in {where} {BOUND_S} s later (group timeout {GROUP_TIMEOUT_S} s)"
        what, detail = events[-1]
        if what == "reduced":
            return f"rank {rank} all_reduce gave {detail}" + (" (right)" if detail == 3.0 else "")
        return f"rank {rank} {detail}"

    if cycle == 0:  # nothing was destroyed yet: not this bug
        if not all(ended(seen.get((r, 0), [])) for r in range(2)):  # the first group is slow: a busy machine
            print(f"NO VERDICT: the first group did not finish: {said(0)}; {said(1)} (a busy machine?); "
                  "run it again on a quieter one")
            return 3
        raise RuntimeError(f"the first group failed: {said(0)}; {said(1)}")
    names = sorted({d[:8] + "..." for events in seen.values() for what, d in events if what == "made"})
    print(f"BUG: new_group([0, 1], use_local_synchronization=True) made again after destroy_process_group "
          f"(group names seen: {', '.join(names)}): group {cycle + 1} failed: {said(0)}; {said(1)}")
    return 1


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
