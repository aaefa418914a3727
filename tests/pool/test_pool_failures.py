"""A failure on any rank is reported precisely, and the pool recovers from it."""

from __future__ import annotations

import pytest
from helpers import rank_fns

from fuzzdist import RankCrash, RankError, RankFailure, RankPool, RankTimeout


@pytest.fixture(scope="module")
def pool():
    with RankPool(2, timeout=3, straggler_grace=1) as pool:
        yield pool


def test_results_come_back_in_rank_order():
    with RankPool(3, timeout=10) as pool:
        assert pool.run(rank_fns.whoami) == [(r, 3, "cpu", "gloo") for r in range(3)]
        assert pool.run(rank_fns.broadcast_sum, 5, 2) == [10.0, 10.0, 10.0]


def test_exception_on_rank_1_only(pool):
    with pytest.raises(RankError) as info:
        pool.run(rank_fns.raise_on, 1)
    err = info.value
    assert err.ranks == [1]
    assert err.exc_types == {1: "builtins.ValueError"}
    assert "planted failure on rank 1" in err.tracebacks[1]
    assert "rank_fns.py" in err.tracebacks[1]
    # Chained to the original exception, rebuilt with its type and remote site.
    assert type(err.__cause__) is ValueError
    assert err.__cause__.__traceback__ is not None
    last = err.__cause__.__traceback__
    while last.tb_next:
        last = last.tb_next
    assert last.tb_frame.f_code.co_filename.endswith("rank_fns.py")
    assert isinstance(err, RankFailure) and isinstance(err, AssertionError)
    assert pool.run(rank_fns.broadcast_sum, 4, 0) == [6.0, 6.0]


def test_ranks_that_raised_beside_ranks_that_returned_are_replaced(pool):
    # A rank that raised may have left a collective its peers completed without it (a torch bug can make one
    # finish alone), and the default group would then be out of step: the next example gets fresh ranks.
    generation = pool.generation
    with pytest.raises(RankError):
        pool.run(rank_fns.raise_on, 1)
    assert pool.generation == generation + 1
    assert pool.run(rank_fns.broadcast_sum, 4, 0) == [6.0, 6.0]


def test_exception_on_every_rank_needs_no_restart(pool):
    generation = pool.generation
    with pytest.raises(RankError) as info:
        pool.run(rank_fns.raise_on_all)
    assert info.value.ranks == [0, 1]
    assert pool.run(rank_fns.broadcast_sum, 4, 0) == [6.0, 6.0]
    assert pool.generation == generation  # every rank raised: none went further than the others could


def test_hang_is_a_timeout_with_the_stack_then_recovery(pool):
    generation = pool.generation
    with pytest.raises(RankTimeout) as info:
        pool.run(rank_fns.hang_on, 1)
    err = info.value
    assert err.ranks == [1]
    assert "hang_on" in err.stacks[1] and "rank_fns.py" in err.stacks[1]
    assert "rank 1" in str(err) and "3s timeout" in str(err)
    assert pool.run(rank_fns.broadcast_sum, 4, 1) == [6.0, 6.0]
    assert pool.generation == generation + 1


@pytest.mark.parametrize(("how", "cause"), [("exit", "exit code 3"), ("segv", "SIGSEGV"), ("kill", "SIGKILL")])
def test_crash_names_rank_and_cause_then_recovery(pool, how, cause):
    generation = pool.generation
    old_pids = pool.pids
    with pytest.raises(RankCrash) as info:
        pool.run(rank_fns.die_on, 1, how)
    err = info.value
    assert err.ranks == [1]
    assert err.causes == {1: cause}
    assert cause in str(err)
    if how == "segv":  # faulthandler's stack at the fatal signal travels with the failure
        assert "die_on" in err.stacks[1]
    assert pool.run(rank_fns.broadcast_sum, 3, 0) == [3.0, 3.0]
    assert pool.generation == generation + 1
    assert not set(old_pids) & set(pool.pids)


def test_rank_stuck_in_collective_after_peer_failed(pool):
    with pytest.raises(RankError) as info:
        pool.run(rank_fns.raise_before_barrier, 1)
    err = info.value
    assert err.ranks == [1]
    assert err.stragglers == [0]
    assert "barrier" in err.straggler_stacks[0]
    assert pool.run(rank_fns.broadcast_sum, 3, 1) == [3.0, 3.0]


def test_unpicklable_return_value_is_an_error(pool):
    with pytest.raises(RankError, match="can't be sent back to the driver"):
        pool.run(rank_fns.return_unpicklable)
    assert pool.run(rank_fns.broadcast_sum, 2, 0) == [1.0, 1.0]


def test_every_wait_is_bounded_by_the_timeout(pool):
    import time

    start = time.monotonic()
    with pytest.raises(RankTimeout):
        pool.run(rank_fns.hang_on, 0)
    # the 3s timeout, the stack dump and the kill; not the 30s+ gloo timeout
    assert time.monotonic() - start < 3 + 5


def test_reply_the_driver_cannot_unpickle_is_an_error_not_a_broken_pool(pool):
    import pickle

    import torch

    try:
        pickle.loads(pickle.dumps(torch.zeros(2, dtype=torch.uint16)))
    except Exception:  # noqa: BLE001 - whatever pickling raises means it can't
        pass
    else:
        pytest.skip("this torch unpickles uint16 tensors")
    with pytest.raises(RankError, match="can't be unpickled in the driver") as info:
        pool.run(rank_fns.return_uint16)
    assert info.value.ranks == [0, 1]
    assert pool.run(rank_fns.broadcast_sum, 3, 0) == [3.0, 3.0]
