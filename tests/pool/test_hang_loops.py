"""A loop that doesn't end is told apart from a slow example, and the hang probes read the flight recorder
only when a rank may be in a deadlock.

The loops are planted in a real 2-rank gloo pool with a short timeout (they run into it); the readings
that tell a loop from a slow example are also made up, for the cases a pool can't plant on purpose.
"""

from __future__ import annotations

import hashlib
import time

import pytest
import torch
import torch.distributed as dist
from helpers import flight_record

from fuzzdist import RankPool, RankTimeout
from fuzzdist.errors import EndlessLoop, SlowExample
from fuzzdist.pool import controller
from fuzzdist.pool.hangs import LOOP_READINGS, diagnose
from fuzzdist.pool.rank.rank_state import Collective, RankState, Site

TIMEOUT = 3.0


# -- planted in the ranks (top-level: the ranks import them from this module) -----------------------------


def spin_forever(ctx):
    """Every rank goes round a pure-Python loop with no way out."""
    n = 0
    while True:  # the planted loop
        n += 1


def spin_while_peer_waits(ctx):
    """Rank 1 spins; rank 0 waits for it in an all_reduce it never joins."""
    if ctx.rank == 0:
        dist.all_reduce(torch.ones(4))
        return
    spin_forever(ctx)


def sleep_in_steps(ctx, seconds):
    """Slow but progressing: a step at a time, each a short sleep, past the timeout."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.02)


def hash_in_steps(ctx, seconds):
    """Slow but progressing, busy on the CPU: each step is a call that hashes a buffer."""
    data = bytes(8 << 20)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        hashlib.sha256(data).digest()


def sleep_briefly(ctx, seconds):
    """A passing example that runs past the first probes, with no collective in flight."""
    time.sleep(seconds)


def two_collectives_differ(ctx):
    """Rank 0 all-reduces where rank 1 broadcasts: a certain deadlock at step 1."""
    if ctx.rank == 0:
        dist.all_reduce(torch.ones(4))
    else:
        dist.broadcast(torch.ones(2, dtype=torch.int64), src=0)


def _line_of(fn, marker: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


# -- in a real pool --------------------------------------------------------------------------------------


class _CountingPool(RankPool):
    """A RankPool that notes, for every snapshot request, whether it read the flight recorder's records."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[bool] = []

    def _snapshots(self, seq, ranks, with_stack, records=True):
        self.reads.append(records)
        return super()._snapshots(seq, ranks, with_stack, records)


@pytest.fixture(scope="module")
def pool():
    with _CountingPool(2, timeout=TIMEOUT) as pool:
        yield pool


def _hang(pool, fn, *args) -> RankTimeout:
    pool.start()
    with pytest.raises(RankTimeout) as info:
        pool.run(fn, *args)
    return info.value


def test_a_pure_python_loop_is_named_as_a_loop_not_as_slow(pool):
    err = _hang(pool, spin_forever)
    assert isinstance(err.__cause__, EndlessLoop)
    loop = err.diagnosis.loop
    line = loop.site.lineno
    start = _line_of(spin_forever, "the planted loop")
    assert (loop.site.filename, loop.site.function) == (__file__, "spin_forever")
    assert line in (start, start + 1)  # the while or its body, as the interpreter numbers the jump back
    assert loop.readings >= LOOP_READINGS and loop.cpu > 0
    assert f"busy in test_hang_loops.py:{line} (spin_forever) across {loop.readings} samples" in str(err)
    assert "looks like a loop that doesn't end" in str(err)
    assert "Raise the timeout" not in str(err)  # a longer timeout would not help
    assert err.diagnosis.to_dict()["loop"]["line"] == line
    tb = err.__cause__.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert (tb.tb_frame.f_code.co_filename, tb.tb_lineno) == (__file__, line)  # the hang's identity: the loop


@flight_record.needs_gloo_record()
def test_a_loop_a_peer_waits_for_is_named_with_the_wait(pool):
    err = _hang(pool, spin_while_peer_waits)
    assert isinstance(err.__cause__, EndlessLoop) and err.diagnosis.loop.rank == 1
    assert "rank 1 is busy in test_hang_loops.py" in str(err)
    assert "rank 0 waits for it in all_reduce #1 (float32[4])" in str(err)


def test_a_slow_example_that_sleeps_in_steps_is_slow(pool):
    err = _hang(pool, sleep_in_steps, 60)
    assert isinstance(err.__cause__, SlowExample) and err.diagnosis.loop is None
    assert "slow, not stuck" in str(err) and "Raise the timeout" in str(err)


def test_a_slow_example_busy_in_calls_is_slow(pool):
    err = _hang(pool, hash_in_steps, 60)
    assert isinstance(err.__cause__, SlowExample) and err.diagnosis.loop is None


def test_a_slow_passing_example_is_read_light(pool, monkeypatch):
    monkeypatch.setattr(controller, "FULL_READ_AFTER_S", float("inf"))  # however long load makes it take
    pool.start()
    pool.reads.clear()
    assert pool.run(sleep_briefly, 0.4) == [None, None]
    assert pool.reads and not any(pool.reads)  # probed, and never the whole flight recorder


@flight_record.needs_gloo_record()
def test_a_deadlock_is_still_declared_from_the_light_reading(pool, monkeypatch):
    monkeypatch.setattr(controller, "FULL_READ_AFTER_S", float("inf"))  # only the light reading can call for it
    pool.start()
    pool.reads.clear()
    err = _hang(pool, two_collectives_differ)
    assert err.deadlock and "different collectives at step 1" in str(err)
    assert pool.reads.count(True) >= 2  # the two readings that confirmed it read the records


# -- the diagnosis alone, on made-up readings ------------------------------------------------------------


_LOOP = Site("/src/prop.py", 12, "spin", "n += 1")
_USER = Site("/src/prop.py", 12, "spin", "n += 1")


def _reading(elapsed, cpu, spinning=_LOOP, call=None, collectives=(), unfinished=False, records=True):
    return RankState(
        rank=1,
        seq=1,
        finished=False,
        elapsed=elapsed,
        collectives=tuple(collectives) if records else None,
        call=call,
        user_site=_USER,
        records_read=records,
        unfinished_ops=None if records else unfinished,
        spinning=spinning,
        cpu=cpu,
    )


def _diagnose(*readings):
    *earlier, last = readings
    return diagnose({1: last}, {}, 2, earlier={1: earlier})


def test_three_readings_at_one_jump_using_the_cpu_are_a_loop():
    d = _diagnose(_reading(0.4, 0.1, records=False), _reading(0.8, 0.3, records=False), _reading(3.0, 1.1))
    assert d.kind is EndlessLoop and not d.may_be_slow and d.site == _LOOP
    assert (d.loop.readings, round(d.loop.seconds, 1), round(d.loop.cpu, 1)) == (3, 2.6, 1.0)


def test_two_readings_are_not_enough():
    d = _diagnose(_reading(0.8, 0.3, records=False), _reading(3.0, 1.1))
    assert d.kind is SlowExample and d.loop is None


def test_a_thread_at_the_jump_that_used_no_cpu_is_no_loop():
    d = _diagnose(_reading(0.4, 0.5, records=False), _reading(0.8, 0.5, records=False), _reading(3.0, 0.5))
    assert d.kind is SlowExample


def test_readings_at_different_loops_are_progress():
    other = Site("/src/prop.py", 20, "spin", "m += 1")
    elsewhere = _reading(0.4, 0.1, spinning=other, records=False)
    d = _diagnose(elsewhere, _reading(0.8, 0.3, records=False), _reading(3.0, 1.1))
    assert d.kind is SlowExample


def test_a_reading_in_a_call_or_with_a_collective_in_flight_breaks_the_run():
    in_call = _reading(0.8, 0.3, spinning=None, call="all_reduce", records=False)
    assert _diagnose(_reading(0.4, 0.1, records=False), in_call, _reading(3.0, 1.1)).kind is not EndlessLoop
    pending = _reading(0.8, 0.3, unfinished=True, records=False)
    assert _diagnose(_reading(0.4, 0.1, records=False), pending, _reading(3.0, 1.1)).kind is not EndlessLoop
    waiting = Collective("0", "default_pg", None, 1, "all_reduce", False, ((4,),), ("float32",), False)
    last = _reading(3.0, 1.1, collectives=[waiting])
    d = _diagnose(_reading(0.4, 0.1, records=False), _reading(0.8, 0.3, records=False), last)
    assert d.kind is not EndlessLoop


def test_a_light_reading_may_hide_a_deadlock_only_where_nothing_is_in_flight():
    assert not _reading(1, 0, records=False, unfinished=False).may_deadlock()
    assert _reading(1, 0, records=False, unfinished=True).may_deadlock()
    assert _reading(1, 0, records=False, unfinished=None).may_deadlock()  # the counters can't say
    assert _reading(1, 0, records=False, call="broadcast").may_deadlock()  # p2p ops aren't counted
