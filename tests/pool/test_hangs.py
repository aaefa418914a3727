"""A hang is explained, declared at once when it is a certain deadlock, and told apart from other hangs.

Each test plants one kind of hang in a real 2-rank gloo pool.  The pool's timeout is long (20 s):
a deadlock the tests expect to be declared early must be, or the test fails on its elapsed time.
"""

from __future__ import annotations

import linecache
import sys
import time

import pytest
from helpers import flight_record, planted_hangs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fuzzdist import RankError, RankPool, RankTimeout
from fuzzdist.compat.hypothesis_internals import interesting_origin
from fuzzdist.errors import CollectiveMismatch, MissedCollective, PendingWork, SlowExample, StuckCollective
from fuzzdist.pool.hangs import diagnose
from fuzzdist.pool.rank import rank_state
from fuzzdist.pool.rank.rank_state import Collective, RankState, Site

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

TIMEOUT = 20.0
EARLY = 8.0  # a declared deadlock comes well before the timeout, even on a loaded 2-core machine


needs_gloo_record = flight_record.needs_gloo_record()


@pytest.fixture(scope="module")
def pool():
    with RankPool(2, timeout=TIMEOUT) as pool:
        yield pool


@pytest.fixture(scope="module")
def short_pool():
    """For the hangs that must run to the timeout."""
    with RankPool(2, timeout=3) as pool:
        yield pool


def _hang(pool, fn, *args) -> tuple[RankTimeout, float]:
    pool.start()  # a restart after the previous test's hang is not part of the time
    start = time.monotonic()
    with pytest.raises(RankTimeout) as info:
        pool.run(fn, *args)
    return info.value, time.monotonic() - start


def _cause_line(err: BaseException) -> tuple[str, int]:
    tb = err.__cause__.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename, tb.tb_lineno


@needs_gloo_record
def test_different_collectives_at_one_step_are_a_deadlock_declared_at_once(pool):
    err, elapsed = _hang(pool, planted_hangs.different_collectives, 6)
    assert err.deadlock and elapsed < EARLY
    assert isinstance(err.__cause__, CollectiveMismatch)
    summary = err.diagnosis.summary
    assert "rank 0 waits in all_reduce #2 (float32[6]) which rank 1 never entered" in summary
    assert "rank 1 waits in broadcast #2 (src=0, int64[2])" in summary
    assert str(err).startswith("deadlock: " + summary)
    # The identity is the stuck rank's own line: rank 0's second all_reduce.
    filename, lineno = _cause_line(err)
    assert filename == planted_hangs.__file__ and "dist.all_reduce(t)" in linecache.getline(filename, lineno)
    assert pool.run(planted_hangs.different_collectives, 5) == [5, 5]  # the pool recovered


@needs_gloo_record
def test_a_skipped_collective_names_the_rank_that_left(pool):
    err, elapsed = _hang(pool, planted_hangs.skipped_collective, 4)
    assert err.deadlock and elapsed < EARLY and err.ranks == [0]
    assert isinstance(err.__cause__, MissedCollective)
    assert (
        "rank 0 waits in all_reduce #2 (float32[4]) which rank 1 never entered: rank 1 returned after "
        "1 collective on that group"
    ) in err.diagnosis.summary
    assert "all_reduce #1 (float32[4]) done; all_reduce #2 (float32[4]) WAITING" in str(err)


@needs_gloo_record
def test_a_mismatched_shape_names_both_shapes(pool):
    err, elapsed = _hang(pool, planted_hangs.mismatched_shape, 3)
    assert err.deadlock and elapsed < EARLY and err.ranks == [1]
    assert isinstance(err.__cause__, CollectiveMismatch)
    assert (
        "rank 1 waits in all_reduce #1 (float32[3]); rank 0 completed all_reduce #1 (float32[1]) "
        "(same collective, different shapes at step 1)"
    ) in err.diagnosis.summary


@needs_gloo_record
def test_a_mismatched_root_names_both_roots(pool):
    err, elapsed = _hang(pool, planted_hangs.mismatched_root, 5)
    assert err.deadlock and elapsed < EARLY
    assert isinstance(err.__cause__, CollectiveMismatch)
    summary = err.diagnosis.summary
    assert "broadcast #1 (src=0, float32[3])" in summary and "broadcast #1 (src=1, float32[3])" in summary
    assert "different roots" in summary


def test_a_work_that_never_completes_is_named_with_the_drawn_order(short_pool):
    err, elapsed = _hang(short_pool, planted_hangs.never_completed_work, 3)
    assert not err.deadlock and elapsed >= 3  # nothing proves it can't complete: the timeout decides
    assert isinstance(err.__cause__, PendingWork)
    assert (
        "work 0 (allreduce): held at offset 0 of window 0; the drawn order (1, 0) releases offset 1 first "
        "(never issued)"
    ) in str(err)


def test_a_slow_example_is_not_mistaken_for_a_deadlock(short_pool):
    err, elapsed = _hang(short_pool, planted_hangs.slow, 60)
    assert not err.deadlock and elapsed >= 3
    assert isinstance(err.__cause__, SlowExample)
    assert "slow, not stuck" in str(err) and "Raise the timeout" in str(err)


@needs_gloo_record
def test_stragglers_after_a_failure_are_explained_without_waiting_out_the_grace(pool):
    pool.start()
    start = time.monotonic()
    with pytest.raises(RankError) as info:
        pool.run(planted_hangs.raise_then_wait, 3)
    assert time.monotonic() - start < pool.straggler_grace  # the default grace is 5 s
    err = info.value
    assert err.stragglers == [0]
    assert "rank 0 waits in all_reduce #1 (float32[3]) which rank 1 never entered: rank 1 raised ValueError" in str(err)


def test_stacks_start_at_the_rank_function_without_fuzzdist_plumbing(pool):
    err, _ = _hang(pool, planted_hangs.skipped_collective, 4)
    stack = err.stacks[0]
    assert stack.lstrip().startswith(f'File "{planted_hangs.__file__}"')
    assert "fuzzdist/pool" not in stack and "fuzzdist-" not in stack and "multiprocessing" not in stack
    assert "distributed_c10d.py" in stack  # torch's frames stay: the user needs them


@needs_gloo_record
def test_two_hangs_in_one_property_are_two_failures_each_shrunk_to_its_minimum(pool):
    @settings(
        max_examples=300,
        database=None,
        derandomize=True,
        deadline=None,
        report_multiple_bugs=True,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(a=st.integers(0, 50), b=st.integers(0, 50))
    def prop(a, b):
        pool.run(planted_hangs.two_hangs, a, b)

    with pytest.raises(BaseExceptionGroup) as info:
        prop()
    errors = sorted(info.value.exceptions, key=lambda e: type(e.__cause__).__name__)
    assert [type(e.__cause__) for e in errors] == [CollectiveMismatch, MissedCollective]
    assert all(isinstance(e, RankTimeout) and e.deadlock for e in errors)
    examples = ["\n".join(getattr(e, "__notes__", [])) for e in errors]
    assert "a=6" in examples[0] and "b=0" in examples[0]
    assert "a=0" in examples[1] and "b=4" in examples[1]


def test_without_a_flight_record_a_hang_is_explained_from_the_stacks_at_the_timeout(monkeypatch):
    # TORCH_FR_BUFFER_SIZE=0 takes the record away on any torch, as a torch whose recorder skips gloo does.
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "0")
    with RankPool(2, timeout=3) as unrecorded:
        err, elapsed = _hang(unrecorded, planted_hangs.different_collectives, 6)
        assert not err.deadlock and elapsed >= 3  # no step is known: nothing proves a deadlock
        assert isinstance(err.__cause__, CollectiveMismatch)
        summary = err.diagnosis.summary
        assert "rank 0 is inside all_reduce in different_collectives at line 18" in summary, summary
        assert "rank 1 is inside broadcast(src=0) in different_collectives at line 16" in summary, summary
        assert "(different calls: probably a mismatch)" in summary
        assert (
            "torch's flight recorder is off: TORCH_FR_BUFFER_SIZE=0, so the step each rank is at is unknown "
            "and nothing proves a deadlock"
        ) in summary
        assert "collectives: unknown (torch's flight recorder is off: TORCH_FR_BUFFER_SIZE=0)" in str(err)
        assert "collectives this example: none" not in str(err)
        assert "Raise the timeout" not in str(err)  # different calls are no slowness
        filename, lineno = _cause_line(err)
        assert filename == planted_hangs.__file__ and lineno == 18
        assert unrecorded.run(planted_hangs.different_collectives, 5) == [5, 5]


# -- the diagnosis alone, on made-up snapshots: the cases a 2-rank gloo pool can't easily plant ------------


def _c(step, op="all_reduce", shape=(4,), done=False, group="0", p2p=False):
    return Collective(
        group=group,
        group_desc="default_pg" if group == "0" else "sub",
        group_ranks=None,
        step=step,
        op=op,
        p2p=p2p,
        shapes=(shape,),
        dtypes=("float32",),
        done=done,
    )


def _state(rank, *collectives, call=None, call_args=(), finished=False, pending=(), recorder=True):
    return RankState(
        rank=rank,
        seq=1,
        finished=finished,
        elapsed=1.0,
        collectives=tuple(collectives) if recorder else None,
        call=call,
        call_args=tuple(call_args),
        user_site=Site(f"/src/prop_{rank}.py", 10 + rank, "fn", "line"),
        pending_works=tuple(pending),
    )


def test_a_peer_still_running_its_own_code_is_no_certain_deadlock():
    d = diagnose({0: _state(0, _c(1, done=True), _c(2)), 1: _state(1, _c(1, done=True))}, {}, 2)
    assert d.kind is MissedCollective and not d.deadlock
    assert "rank 1 never reached collective #2: it is in its own code, in fn at line 11" in d.summary


def test_a_peer_that_left_after_the_same_step_missed_nothing():
    # A broadcast's root returns once it has sent; the receiver, slow to be scheduled, still waits in it.
    root = _state(0, _c(1, op="broadcast", done=True), finished=True)
    d = diagnose({0: root, 1: _state(1, _c(1, op="broadcast"))}, {0: "returned"}, 2)
    assert not d.deadlock and d.kind is StuckCollective


def test_every_rank_in_the_same_collective_is_stuck_not_a_deadlock():
    d = diagnose({0: _state(0, _c(1)), 1: _state(1, _c(1))}, {}, 2)
    assert d.kind is StuckCollective and not d.deadlock and d.may_be_slow


def test_a_recv_whose_sender_left_is_a_deadlock():
    d = diagnose(
        {0: _state(0, _c(1, op="recv", p2p=True), call="recv", call_args=[("src", "1")]), 1: _state(1, finished=True)},
        {1: "returned"},
        2,
    )
    assert d.kind is MissedCollective and d.deadlock
    assert "recv p2p #1 (src=1, float32[4])" in d.summary


def test_an_earlier_disagreement_that_completed_anyway_is_named():
    d = diagnose(
        {
            0: _state(0, _c(1, shape=(2, 2), done=True), _c(2)),
            1: _state(1, _c(1, shape=(4,), done=True), _c(2, op="broadcast")),
        },
        {},
        2,
    )
    assert d.kind is CollectiveMismatch and d.deadlock
    assert "they first disagreed at step 1" in d.summary


def test_without_the_flight_recorder_a_hang_is_still_told_from_a_slow_example():
    d = diagnose({0: _state(0, recorder=False), 1: _state(1, recorder=False)}, {}, 2)
    assert d.kind is SlowExample and "no flight recorder" in d.summary


_NO_GLOO = "torch 9.9's flight recorder keeps no record of gloo's collectives"


def _unrecorded(rank, call=None, call_args=(), finished=False):
    return RankState(
        rank=rank,
        seq=1,
        finished=finished,
        elapsed=1.0,
        collectives=None,
        call=call,
        call_args=tuple(call_args),
        user_site=Site(f"/src/prop_{rank}.py", 10 + rank, "fn", "line"),
        unrecorded=_NO_GLOO,
    )


def test_where_the_recorder_skips_the_backend_the_stacks_explain_and_nothing_is_declared():
    same = diagnose({0: _unrecorded(0, "all_reduce"), 1: _unrecorded(1, "all_reduce")}, {}, 2)
    assert same.kind is StuckCollective and not same.deadlock
    assert same.summary == (
        "rank 0 is inside all_reduce in fn at line 10 of prop_0.py (line); rank 1 is inside "
        f"all_reduce in fn at line 11 of prop_1.py (line); {_NO_GLOO}, so the step each rank "
        "is at is unknown and nothing proves a deadlock: declared at the timeout"
    )
    roots = diagnose(
        {0: _unrecorded(0, "broadcast", [("src", "0")]), 1: _unrecorded(1, "broadcast", [("src", "1")])}, {}, 2
    )
    assert roots.kind is CollectiveMismatch and not roots.deadlock
    assert "broadcast(src=0)" in roots.summary and "(different calls: probably a mismatch)" in roots.summary
    left = diagnose({0: _unrecorded(0, "all_reduce"), 1: _unrecorded(1, finished=True)}, {1: "returned"}, 2)
    assert left.kind is MissedCollective and not left.deadlock and left.may_be_slow
    assert (
        "rank 0 is inside all_reduce in fn at line 10 of prop_0.py (line); rank 1 returned and left the example"
    ) in left.summary
    assert left.details[0] == f"collectives: unknown ({_NO_GLOO})"
    mixed = diagnose({0: _unrecorded(0, "all_reduce"), 1: _unrecorded(1)}, {}, 2)
    assert mixed.kind is StuckCollective and "rank 1 is running its own code in fn at line 11" in mixed.summary


def test_a_subgroup_collective_waits_only_for_its_members():
    # rank 2 left, but the group rank 0 waits on is {0, 1}: rank 1 is the one that never came.
    d = diagnose(
        {0: _state(0, _c(1, group="5")), 1: _state(1, _c(1, group="5", op="broadcast")), 2: _state(2, finished=True)},
        {2: "returned"},
        3,
    )
    assert d.kind is CollectiveMismatch and "rank 1 waits in broadcast #1 on group sub" in d.summary


def test_the_origin_is_raised_at_the_stuck_line_so_hypothesis_tells_hangs_apart():
    a = diagnose({0: _state(0, _c(1)), 1: _state(1, finished=True)}, {1: "returned"}, 2).origin()
    b = diagnose({0: _state(1, _c(1)), 1: _state(1, finished=True)}, {1: "returned"}, 2).origin()
    assert isinstance(a, MissedCollective)
    tb = a.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert (tb.tb_frame.f_code.co_filename, tb.tb_lineno) == ("/src/prop_0.py", 10)
    assert interesting_origin(a) != interesting_origin(b)


def test_inside_a_collective_without_a_record_is_explained_but_not_declared():
    # What TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint check, or a backend without a flight record, shows.
    d = diagnose({0: _state(0, _c(1, done=True), call="all_reduce"), 1: _state(1, finished=True)}, {1: "returned"}, 2)
    assert d.kind is MissedCollective and not d.deadlock
    assert "rank 0 is inside all_reduce in fn at line 10" in d.summary and "rank 1 returned" in d.summary


def test_roots_are_compared_only_between_the_calls_of_that_step():
    # Rank 0 issued broadcast #1 asynchronously and now waits in all_reduce #2; rank 1 waits in broadcast #1.
    d = diagnose(
        {
            0: _state(0, _c(1, op="broadcast"), _c(2), call="all_reduce"),
            1: _state(1, _c(1, op="broadcast"), call="broadcast", call_args=[("src", "0")]),
        },
        {},
        2,
    )
    assert d.kind is StuckCollective and not d.deadlock


def test_a_blocked_stream_names_the_works_still_blocking_it():
    # The GPU property's bookkeeping, checked without a GPU: what a hang in it would list.
    import torch

    from fuzzdist import strategies as fst
    from fuzzdist.properties.block_stream import BlockedStream

    order = fst.CompletionOrder(n=2, steps=(("complete", 1), ("complete", 0)))
    blocked = BlockedStream("stream 7", order)
    blocked.futures.extend([torch.futures.Future(), torch.futures.Future()])
    blocked.futures[1].set_result(None)
    state = rank_state.snapshot(seq=123)
    assert blocked.fuzzdist_pending_works() == [
        "Work 0 blocks stream 7: its future is unresolved (the drawn steps: (('complete', 1), ('complete', 0)))"
    ]
    assert blocked.fuzzdist_pending_works()[0] in state.pending_works


def test_a_survivor_waiting_for_a_dead_rank_is_told():
    d = diagnose({1: _state(1, _c(1, shape=(5,)), call="all_reduce")}, {}, 2, dead={0: "SIGABRT"})
    assert d.kind is MissedCollective and d.deadlock
    assert d.summary == "rank 1 waits in all_reduce #1 (float32[5]), which rank 0 can never join: it died (SIGABRT)"


def test_a_snapshot_whose_frames_fail_to_read_still_answers(monkeypatch):
    # A snapshot reads another thread's frames, and a user's object there may fail its repr: the rank still
    # answers, saying what it couldn't read, so that a hang is explained from the rest.
    def broken(frames):
        raise RuntimeError("planted: repr failed")

    monkeypatch.setattr(rank_state, "_torch_call", broken)
    monkeypatch.setattr(rank_state, "_user_site", broken)
    state = rank_state.snapshot(seq=123, with_stack=True)
    assert state.call is None and state.user_site is None
    assert "the torch.distributed call unreadable (RuntimeError: planted: repr failed)" in state.note
    assert "the example's own line unreadable" in state.note
