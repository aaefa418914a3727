"""Every example starts clean: seeded from the example, state restored or the ranks recycled."""

from __future__ import annotations

import rank_fns

from fuzzdist import RankPool


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
