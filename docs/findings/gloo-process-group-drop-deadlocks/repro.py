"""gloo-process-group-drop-deadlocks: on torch 2.6.0, dropping the last reference to a gloo process group right
after a collective on it can freeze the whole process.

``destroy_process_group(group)`` is documented to "Destroy a given process group"; the group object is then
dropped like any other.  On torch 2.6.0 the Python ``ProcessGroup``'s deallocation runs ``~ProcessGroupGloo``
with the GIL held, and that destructor joins the group's worker threads.  A worker that is still destroying
the collective's just-completed Work frees the Work's tensors; a tensor whose Python object died first (the
caller's tensors went out of scope) takes the GIL to free its preserved PyObject.  The worker waits for the
GIL, the destructor waits for the worker: every Python thread of the process stops for good (the peers then
wait for it in their next collective).  ``gdb`` shows the two threads: ``take_gil`` under
``PyObjectSlot::maybe_destroy_pyobj`` under ``~AsyncAllgatherWork`` under ``ProcessGroupGloo::runLoop``, and
``~ProcessGroupGloo`` under ``pybind11::class_<c10d::ProcessGroup, ...>::dealloc``.

The script runs, on 2 gloo ranks, up to 300 times: ``new_group([0, 1])``, ``all_gather`` of fresh tensors
(dropped at once), ``destroy_process_group(group)``, ``del group``.  Each rank counts its rounds in shared
memory (the parent reads it: a frozen rank can't report).  A rank whose count stops moving for 20 s (plus its
start-up time) while the other is alive is the bug.

    python docs/findings/gloo-process-group-drop-deadlocks/repro.py

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
WORLD = 2
ROUNDS = 300
STALL_S = 20.0  # a round takes milliseconds; no progress for this long (plus the start-up time) is a freeze


def rank_main(rank, port, count, started, beat):
    # torch is imported in the rank processes only: the parent just starts them and reads their counts.
    import os
    import threading

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=timedelta(seconds=STARTUP_S))
    started.value = 1

    def heartbeat():  # a Python thread of its own: it stops only if the process's Python threads all stop
        while True:
            beat.value += 1
            time.sleep(0.1)

    threading.Thread(target=heartbeat, daemon=True).start()

    def one_round():
        group = dist.new_group(list(range(WORLD)))
        mine = torch.full((64,), float(rank))
        outs = [torch.empty(64) for _ in range(WORLD)]
        dist.all_gather(outs, mine, group=group)
        del mine, outs  # the caller's tensors die first: the Work may hold the last references
        dist.destroy_process_group(group)
        del group  # the last reference: ~ProcessGroupGloo runs here

    for i in range(ROUNDS):
        one_round()
        count.value = i + 1
    os._exit(0)


def main():
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    counts = [ctx.Value("i", 0, lock=False) for _ in range(WORLD)]
    started = [ctx.Value("i", 0, lock=False) for _ in range(WORLD)]
    beats = [ctx.Value("i", 0, lock=False) for _ in range(WORLD)]
    ranks = [ctx.Process(target=rank_main, args=(r, port, counts[r], started[r], beats[r]), daemon=True)
             for r in range(WORLD)]
    t0 = time.monotonic()
    for p in ranks:
        p.start()
    try:
        while not all(s.value for s in started):
            if time.monotonic() - t0 > STARTUP_S:
                raise queue.Empty  # still starting: no verdict
            if any(p.exitcode not in (None, 0) for p in ranks):
                raise RuntimeError(f"a rank died while starting (exit codes {[p.exitcode for p in ranks]})")
            time.sleep(0.2)
        stall = STALL_S + (time.monotonic() - t0)
        seen = [c.value for c in counts]
        moved = [time.monotonic()] * WORLD
        while any(p.exitcode is None for p in ranks):
            time.sleep(0.2)
            now = time.monotonic()
            for r in range(WORLD):
                if counts[r].value != seen[r]:
                    seen[r], moved[r] = counts[r].value, now
            stuck = [r for r in range(WORLD) if ranks[r].exitcode is None and now - moved[r] > stall]
            if stuck:
                before = [b.value for b in beats]
                time.sleep(2.0)  # a live process beats 20 times in 2 s
                frozen = [r for r in stuck if beats[r].value == before[r]]
                waiting = [r for r in stuck if r not in frozen]
                if not frozen:
                    raise RuntimeError(f"ranks {stuck} stopped making rounds ({[c.value for c in counts]}) but "
                                       "their heartbeats run: a hang, not the freeze this script looks for")
                print(f"BUG: rounds of new_group, all_gather, destroy_process_group(group), del group stopped at "
                      f"{[c.value for c in counts]} of {ROUNDS}: no progress for {stall:.0f} s; rank(s) {frozen} "
                      f"frozen (not even a Python heartbeat thread runs), rank(s) {waiting} still alive (waiting "
                      "for the frozen rank)")
                return 1
            if any(p.exitcode not in (None, 0) for p in ranks):
                raise RuntimeError(f"a rank failed (exit codes {[p.exitcode for p in ranks]}, "
                                   f"rounds {[c.value for c in counts]})")
    finally:
        for p in ranks:
            p.kill()
            p.join(timeout=5)
    print(f"FIXED: {ROUNDS} rounds of new_group, all_gather, destroy_process_group and dropping the group ran on "
          f"both ranks (rounds done {[c.value for c in counts]})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except queue.Empty:  # a wait that is not part of the bug ran out: a slow machine, not a verdict
        print(f"NO VERDICT: the ranks did not start within {STARTUP_S} s (a busy machine?); "
              "run it again on a quieter one")
        sys.exit(3)
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
