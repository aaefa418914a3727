"""Every example starts clean: seeded from the example, state restored or the ranks recycled."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from helpers import clean_fns, rank_fns

from fuzzdist import RankError, RankPool
from fuzzdist.pool.rank import isolation as _isolation


def test_seed_depends_on_the_example_and_is_the_same_on_every_rank(rank_pool):
    first = rank_pool.run(rank_fns.random_draws)
    again = rank_pool.run(rank_fns.random_draws)
    assert first == again  # same example, same draws (random, numpy and torch)
    assert first[0] == first[1]  # same seed on every rank
    rank_pool.run(rank_fns.broadcast_sum, 1, 0)  # moves the RNGs on
    assert rank_pool.run(rank_fns.random_draws) == first  # ... and that leaks into no later example


def test_different_examples_get_different_seeds(rank_pool):
    a = rank_pool.run(rank_fns.fails_above, 1, 100, 0)
    b = rank_pool.run(rank_fns.fails_above, 2, 100, 0)
    assert a != b
    seeds = {rank_pool.run(rank_fns.whoami_seed, n)[0] for n in range(20)}
    assert len(seeds) == 20


def test_changed_global_state_is_restored(rank_pool):
    before = rank_pool.run(rank_fns.observe_state)
    assert rank_pool.run(rank_fns.pollute_state) == [True, True]
    after = rank_pool.run(rank_fns.observe_state)
    assert after == before
    assert after[0]["env"] is None and after[0]["dtype"] == "torch.float32" and after[0]["grad"] is True
    assert after[0]["sharing"] == "file_descriptor" and after[0]["deterministic"] is False
    assert after[0]["warnings_are_errors"] is False


def test_state_that_cannot_be_undone_recycles_the_ranks():
    with RankPool(2, timeout=10) as pool:
        pids = pool.run(rank_fns.set_alloc_conf)
        assert pool.generation == 2
        after = pool.run(rank_fns.observe_state)
        assert {s["pid"] for s in after}.isdisjoint(pids)
        assert pool.run(rank_fns.read_alloc_conf) == [None, None]


def test_logging_is_restored(rank_pool):
    generation = rank_pool.generation
    before = rank_pool.run(clean_fns.observe_logging)  # makes "fuzzdist.test.before"
    assert rank_pool.run(clean_fns.observe_made_logger) == [None, None]
    changed = rank_pool.run(clean_fns.change_logging)
    assert changed[0]["root"]["level"] == logging.DEBUG and changed[0]["disable"] == logging.CRITICAL
    assert changed[0]["torch.distributed"]["propagate"] is False and changed[0]["fuzzdist.test.before"]["disabled"]
    assert changed[0]["made"]["level"] == logging.ERROR
    assert rank_pool.run(clean_fns.observe_logging) == before
    # the logger the example made stays (code may hold it), as fresh as getLogger makes one
    fresh = {"level": logging.NOTSET, "propagate": True, "disabled": False, "handlers": [], "filters": 0}
    assert rank_pool.run(clean_fns.observe_made_logger) == [fresh, fresh]
    assert rank_pool.generation == generation  # put back in place, not by fresh ranks


def test_process_groups_created_in_an_example_are_destroyed(rank_pool):
    generation = rank_pool.generation
    before = rank_pool.run(clean_fns.observe_groups)
    changed = rank_pool.run(clean_fns.change_groups)
    # new_group(), new_group([0]) (rank 0 only) and the mesh's: each rank's sub-group on its size-1 dimension,
    # and one for the dimension spanning the world where this torch doesn't reuse the default group for it
    mesh = [c["mesh_groups"] for c in changed]
    assert mesh == [1 + (not c["mesh_reuses_world"]) for c in changed]
    assert [len(c["groups"]) - len(b["groups"]) for c, b in zip(changed, before, strict=True)] == [
        2 + mesh[0],
        1 + mesh[1],
    ]
    assert changed[0]["debug_level"] != before[0]["debug_level"]
    assert rank_pool.run(clean_fns.observe_groups) == before
    again = rank_pool.run(clean_fns.change_groups)
    assert len(again[0]["groups"]) == len(changed[0]["groups"])  # none piled up
    assert again[0]["groups"] != changed[0]["groups"]  # new names: the store keys of the old ones are not reused
    assert rank_pool.run(clean_fns.observe_groups) == before
    assert rank_pool.generation == generation


def test_kept_process_groups_outlive_the_example(rank_pool):
    generation = rank_pool.generation
    before = rank_pool.run(clean_fns.observe_groups)
    assert rank_pool.run(clean_fns.cache_kept_group) == [[1.0, 1.0], [1.0, 1.0]]
    kept = rank_pool.run(clean_fns.observe_groups)
    assert len(kept[0]["groups"]) == len(before[0]["groups"]) + 1
    assert rank_pool.run(clean_fns.cache_kept_group) == [[1.0, 1.0], [1.0, 1.0]]  # the cached group still works
    assert rank_pool.run(clean_fns.observe_groups) == kept
    with pytest.raises(RankError, match="planted"):
        rank_pool.run(clean_fns.keep_then_raise)
    assert rank_pool.run(clean_fns.observe_groups) == kept  # a block that raised keeps nothing
    assert rank_pool.generation == generation


def test_destroyed_groups_are_dropped_on_a_thread_of_their_own_one_example_late():
    reaper, release, threads = _isolation._Reaper(), threading.Event(), []
    dropped = []

    class SlowToDestroy:  # stands for a group whose destructor waits for a pending Work
        def __init__(self, n):
            self.n = n

        def __del__(self):
            threads.append(threading.current_thread().name)
            dropped.append(self.n)
            release.wait(30)

    reaper.drop([SlowToDestroy(1)])  # returns at once
    assert reaper.settle(0, timeout=30)  # held, not destroyed: it waits for the next example's groups
    time.sleep(0.05)
    assert dropped == []
    reaper.drop([SlowToDestroy(2)])  # the first is destroyed now, the second held
    reaper.drop([SlowToDestroy(3)])
    assert not reaper.settle(0, timeout=0.1)  # the first is still being destroyed: the third waits behind it
    assert dropped == [1]
    release.set()
    assert reaper.settle(0, timeout=30)
    assert dropped == [1, 2]  # the third stays held until a fourth comes
    assert threads == ["fuzzdist-group-reaper"] * 2


def test_global_hooks_and_modes_are_removed(rank_pool):
    generation = rank_pool.generation
    before = rank_pool.run(clean_fns.observe_hooks)
    assert before[0]["calls"] == [] and before[0]["dispatch_modes"] == 0
    changed = rank_pool.run(clean_fns.change_hooks)
    assert changed[0] == ["forward", "forward_pre", "full_backward", "pack"]
    assert rank_pool.run(clean_fns.observe_hooks) == before
    assert rank_pool.run(clean_fns.disable_saved_tensor_hooks)[0] == "disabled by an earlier example"
    assert rank_pool.run(clean_fns.observe_hooks) == before
    assert rank_pool.generation == generation


def test_what_cannot_be_undone_in_place_recycles_the_ranks():
    leftovers = [
        clean_fns.destroy_default_group,
        clean_fns.create_group_unlisted,  # a torch whose groups fuzzdist can't list
        clean_fns.create_group_with_reaper_stuck,  # earlier groups still waiting for their Works
        clean_fns.bury_function_mode,  # a torch function mode under one fuzzdist must leave
    ]
    with RankPool(2, timeout=10) as pool:
        for generation, fn in enumerate(leftovers, start=2):
            pool.run(fn)
            assert pool.generation == generation, fn.__name__
            assert pool.run(rank_fns.broadcast_sum, 4, 0) == [6.0, 6.0]
        assert [state["function_modes"] for state in pool.run(clean_fns.observe_hooks)] == [0, 0]


def test_default_device_is_restored_both_ways():
    # The guard reads torch's default device without calling get_default_device while none is set:
    # a device set in the example, and one set before it and cleared in it, both go back.
    import torch

    from fuzzdist.pool.rank.isolation import StateGuard

    try:
        guard = StateGuard()
        torch.set_default_device("meta")
        assert guard.restore() == []
        assert torch.get_default_device() == torch.device("cpu")
        torch.set_default_device("meta")
        guard = StateGuard()
        torch.set_default_device(None)
        assert guard.restore() == []
        assert torch.get_default_device() == torch.device("meta")
    finally:
        torch.set_default_device(None)
