"""fsdp1-local-state-dict-hybrid-shard-group-rank: FSDP1 HYBRID_SHARD can't take a LOCAL_STATE_DICT on the ranks
outside the first shard group.

Four ranks wrap one nn.Linear(2, 2) in FullyShardedDataParallel(sharding_strategy=HYBRID_SHARD,
process_group=(shard group, replicate group), device_id=torch.device("cpu")) on gloo, with shard groups
[0, 1], [2, 3] and replicate groups [0, 2], [1, 3], and call ``state_dict()`` under
``StateDictType.LOCAL_STATE_DICT``.  Ranks 2 and 3 raise "ValueError: Global rank 0 does not exist in input
process group: [2, 3]": FSDP1's local post-state-dict hook places its ShardedTensor shard on
``rank:<rank within the shard group>``, which ShardedTensor reads as a global rank.  FSDP1's documentation of
``process_group`` (torch/distributed/fsdp/fully_sharded_data_parallel.py) accepts "a tuple of process groups,
representing the groups to shard and replicate across, respectively" for hybrid strategies, and
``StateDictType`` names no strategy LOCAL_STATE_DICT excludes.

    python docs/findings/fsdp1-local-state-dict-hybrid-shard-group-rank/repro.py

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
WORLD_SIZE = 4
SHARD_GROUPS = ([0, 1], [2, 3])
REPLICATE_GROUPS = ([0, 2], [1, 3])


def rank_main(rank, world_size, port, results):
    # torch is imported in the rank processes only: the parent just starts them and compares.
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy, StateDictType

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=STARTUP_S))
    # every rank creates every group, in the same order, as new_group requires; each keeps its own
    def own(layout):
        made = [(ranks, dist.new_group(ranks)) for ranks in layout]
        return next(group for ranks, group in made if rank in ranks)

    shard, replicate = own(SHARD_GROUPS), own(REPLICATE_GROUPS)
    torch.manual_seed(0)
    model = FullyShardedDataParallel(torch.nn.Linear(2, 2), sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                                     process_group=(shard, replicate), device_id=torch.device("cpu"))
    with FullyShardedDataParallel.state_dict_type(model, StateDictType.LOCAL_STATE_DICT):
        try:
            keys = sorted(model.state_dict())
            error = None
        except ValueError as exc:
            keys = None
            error = " ".join(str(exc).split())[:200]
    results.put((rank, keys, error))
    # no destroy_process_group: the ranks that raised left the others' collectives unmatched; the parent
    # kills every rank once it has the answers


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
        got = {}
        for _ in ranks:
            rank, keys, error = answer(results, ranks)
            got[rank] = (keys, error)
    finally:
        for p in ranks:
            p.join(timeout=5)
            p.kill()
    failed = {rank: error for rank, (_, error) in sorted(got.items()) if error is not None}
    if failed:
        said = "; ".join(f"rank {rank}: {error}" for rank, error in failed.items())
        print(f"BUG: HYBRID_SHARD state_dict() under LOCAL_STATE_DICT raised ValueError on ranks "
              f"{sorted(failed)} (shard groups {list(SHARD_GROUPS)}): {said}")
        return 1
    print(f"FIXED: every rank of a HYBRID_SHARD model returned its LOCAL_STATE_DICT (keys {got[0][0]})")
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
