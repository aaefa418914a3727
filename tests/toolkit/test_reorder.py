"""ReorderingProcessGroup releases Works in the drawn order, in both Work forms, and never hangs.

Two layers:

* in the driver, over a fake inner group (an op "completes" when its real
  Work is waited on, doubling the staged tensors): the release logic itself,
  over many drawn schedules, windows and interleavings of issues and waits;
* on the rank pool, over the real gloo group: the same orders with real
  collectives (allreduce, allreduce_coalesced, broadcast, allgather,
  _allgather_base, barrier), failures and drops, and waits before a work's
  turn.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    BarrierOptions,
    BroadcastOptions,
)

from fuzzdist import strategies as fst
from fuzzdist.errors import ReorderTimeout, ScheduledWorkDropped, ScheduledWorkFailure
from fuzzdist.toolkit.reorder import ReorderingProcessGroup, _busy_ns

FORMS = ("subclass", "future")
WAIT_BOUND = 5.0  # seconds: far above any release latency, far below a hang


def _orders(max_n: int = 6, **kwargs: Any) -> st.SearchStrategy[fst.CompletionOrder]:
    """Completion orders over 1..max_n works (no waits: the group ignores them)."""
    kwargs.setdefault("allow_errors", False)
    kwargs.setdefault("allow_drops", False)
    by_n = {n: fst.completion_orders(n, allow_waits=False, **kwargs) for n in range(1, max_n + 1)}
    return st.integers(1, max_n).flatmap(by_n.__getitem__)


# -- in the driver, over a fake group ------------------------------------------------------


class _FakeWork:
    """The real op of the fake group: it completes when waited on (doubling its tensors)."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        self._tensors = tensors
        self.done = False

    def wait(self, timeout: Any = None) -> bool:
        if not self.done:
            for t in self._tensors:
                t.mul_(2)
            self.done = True
        return True


class _FakeGroup:
    """Just enough of a ProcessGroup for ReorderingProcessGroup: rank 0 of 1."""

    def rank(self) -> int:
        return 0

    def size(self) -> int:
        return 1

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> _FakeWork:
        return _FakeWork(tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> _FakeWork:
        return _FakeWork(tensors)


def _issue(pg: ReorderingProcessGroup, i: int, op: str = "allreduce") -> tuple[Any, torch.Tensor]:
    t = torch.tensor([float(i + 1)])
    return getattr(pg, op)([t], None), t


def _expected(order: fst.CompletionOrder, windows: int) -> list[int]:
    return [w * order.n + offset for w in range(windows) for offset in order.resolution_order]


@pytest.mark.parametrize("form", FORMS)
@given(order=_orders(), windows=st.integers(1, 3))
def test_releases_follow_the_drawn_order(form, order, windows):
    """Issued back to back, each window of n works resolves exactly in the drawn order, and
    a work's data and completion become visible together, at its release, never before."""
    pg = ReorderingProcessGroup(_FakeGroup(), order, work_form=form, stall_timeout=None)
    works, tensors = [], []
    for i in range(windows * order.n):
        work, t = _issue(pg, i)
        works.append(work)
        tensors.append(t)
        released = set(pg.released_order)
        for j in range(i + 1):
            done = works[j].get_future().done()
            doubled = tensors[j].item() == 2.0 * (j + 1)
            assert done == doubled == (j in released), (j, done, doubled, released)
    assert pg.released_order == _expected(order, windows)
    assert {r.trigger for r in pg.release_log} == {"issue"}
    for j, work in enumerate(works):
        assert work.wait() is True
        assert work.get_future().value()[0] is tensors[j]  # the caller's own tensors
    pg.close()


@given(data=st.data(), order=_orders())
def test_visible_waits_never_hang_and_keep_the_relative_order(data, order):
    """Issues and wait()s interleaved at random (subclass form, no watchdog): every wait
    returns; each work resolves once; inside a window, works resolve in their drawn
    relative order; windows no wait touched before completion follow the order exactly."""
    pg = ReorderingProcessGroup(_FakeGroup(), order, work_form="subclass", stall_timeout=None, timeout=WAIT_BOUND)
    works = []
    for _ in range(data.draw(st.integers(1, 3 * order.n), label="ops")):
        if works and data.draw(st.booleans(), label="wait now"):
            k = data.draw(st.integers(0, len(works) - 1), label="wait on")
            assert works[k].wait() is True and works[k].is_completed()
        works.append(_issue(pg, len(works))[0])
    pg.flush()
    log = pg.release_log
    assert sorted(r.index for r in log) == list(range(len(works)))
    position = {offset: p for p, offset in enumerate(order.resolution_order)}
    by_window: dict[int, list[int]] = {}
    for r in log:
        by_window.setdefault(r.window, []).append(r.offset)
    for window, offsets in by_window.items():
        assert offsets == sorted(offsets, key=position.__getitem__), (window, offsets)
        if len(offsets) == order.n and all(r.trigger == "issue" for r in log if r.window == window):
            assert tuple(offsets) == order.resolution_order


@pytest.mark.parametrize("form", FORMS)
def test_wait_before_its_turn_is_released_not_hung(form):
    """Order (2, 0, 1) with only works 0 and 1 issued: a wait on work 0 would deadlock.
    The subclass form sees the wait and flushes; the future form's C++ wait is invisible, and
    the watchdog flushes once the waiting thread is blocked.  Either way: released in schedule
    order (0 then 1), well within the bound."""
    order = fst.CompletionOrder(3, (("complete", 2), ("complete", 0), ("complete", 1)))
    pg = ReorderingProcessGroup(_FakeGroup(), order, work_form=form, stall_timeout=0.01)
    (w0, t0), (w1, t1) = _issue(pg, 0), _issue(pg, 1)
    assert pg.released_order == []
    returned: list[float] = []
    start = time.monotonic()
    waiter = threading.Thread(target=lambda: returned.append(w0.wait()), daemon=True)
    waiter.start()
    waiter.join(WAIT_BOUND)
    assert returned == [True], f"wait() on a held work did not return within {WAIT_BOUND} s"
    assert time.monotonic() - start < WAIT_BOUND
    w1.get_future().wait()  # the same flush released it right after work 0
    assert pg.released_order == [0, 1] and t0.item() == 2.0 and t1.item() == 4.0
    trigger = "wait" if form == "subclass" else "stall"
    assert [r.trigger for r in pg.release_log] == [trigger, trigger]
    # the window was closed: the next work starts a new one, at offset 0 (held: offset 2 first)
    w2, _ = _issue(pg, 2)
    pg.close()
    assert w2.get_future().done()
    last = pg.release_log[-1]
    assert (last.index, last.window, last.offset) == (2, 1, 0) and last.trigger in ("close", "stall")


@pytest.mark.skipif(
    _busy_ns(threading.get_native_id()) is None,
    reason="needs Linux's /proc/self/task/<tid>/schedstat to tell busy from blocked",
)
def test_the_watchdog_does_not_split_a_window_while_the_issuer_is_busy():
    """A slow issuer (computing, not blocked) between two works of a window does not
    get the window flushed: the order is still followed exactly."""
    order = fst.CompletionOrder(2, (("complete", 1), ("complete", 0)))
    pg = ReorderingProcessGroup(_FakeGroup(), order, stall_timeout=0.01)
    _issue(pg, 0)
    deadline = time.monotonic() + 0.1  # 10 stall timeouts of busy work
    x = 0
    while time.monotonic() < deadline:
        x += 1
    _issue(pg, 1)
    assert pg.released_order == [1, 0]
    pg.close()


@pytest.mark.parametrize("form", FORMS)
@given(order=_orders(allow_errors=True, allow_drops=True))
def test_failed_and_dropped_works_report_errors_and_leave_data_untouched(form, order):
    pg = ReorderingProcessGroup(_FakeGroup(), order, work_form=form, stall_timeout=None)
    issued = [_issue(pg, i) for i in range(order.n)]
    for i, (work, t) in enumerate(issued):
        outcome = order.outcome(i)
        if outcome == "complete":
            assert work.wait() is True and work.get_future().value() == [t]
            assert t.item() == 2.0 * (i + 1)
            continue
        error = ScheduledWorkFailure if outcome == "fail" else ScheduledWorkDropped
        if form == "subclass":
            with pytest.raises(error):
                work.wait()
        with pytest.raises(RuntimeError, match=error.__name__):
            work.get_future().wait()
        assert t.item() == float(i + 1)  # the result never landed
    assert [r.outcome for r in pg.release_log] == [order.outcome(i) for i in order.resolution_order]
    pg.close()


def test_ops_outside_the_schedule_resolve_at_issue():
    pg = ReorderingProcessGroup(_FakeGroup(), [1, 0], ops=("allreduce",), stall_timeout=None)
    a0, _ = _issue(pg, 0)
    b, tb = _issue(pg, 1, op="broadcast")  # not held: resolves now, takes no window slot
    assert b.get_future().done() and tb.item() == 4.0 and not a0.get_future().done()
    _issue(pg, 2)
    assert pg.released_order == [1, 2, 0]
    assert [r.trigger for r in pg.release_log] == ["immediate", "issue", "issue"]


def test_a_visible_wait_is_bounded():
    """Whatever the real op does, a wait returns or raises within its bound: a real op that
    never completes makes the release fail past the group's timeout (gloo's Work.wait(timeout)
    raises, like this fake); a wait whose release another thread is stuck in raises
    ReorderTimeout."""

    entered = threading.Event()

    class _StuckWork:
        def wait(self, timeout: Any = None) -> bool:
            entered.set()
            time.sleep(timeout.total_seconds())
            raise RuntimeError("real op timed out")

    class _StuckGroup(_FakeGroup):
        def allreduce(self, tensors, opts):
            return _StuckWork()

    pg = ReorderingProcessGroup(_StuckGroup(), [1, 0], stall_timeout=None, timeout=1.0)
    w0, _ = _issue(pg, 0)
    errors: list[BaseException] = []

    def wait_in_thread() -> None:
        try:
            w0.wait()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    waiter = threading.Thread(target=wait_in_thread, daemon=True)
    start = time.monotonic()
    waiter.start()
    assert entered.wait(WAIT_BOUND)  # the waiter is now inside the release, stuck on the real op
    with pytest.raises(ReorderTimeout, match="not released within 0.1 s"):
        pg._scheduler.wait(pg._scheduler.entries[0], timeout=0.1)
    waiter.join(WAIT_BOUND)
    assert time.monotonic() - start < WAIT_BOUND
    assert len(errors) == 1 and "real op timed out" in str(errors[0])
    assert pg.release_log[0].outcome == "error"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"work_form": "thread"}, "work_form"),
        ({"schedule": [0, 2]}, "permutation"),
        ({"ops": ("alltoall",)}, "unsupported ops"),
        ({"stall_timeout": 0}, "stall_timeout"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ReorderingProcessGroup(_FakeGroup(), **kwargs)


# -- on the rank pool, over gloo ---------------------------------------------------------------

OPS = ("allreduce", "broadcast", "allgather", "_allgather_base", "barrier", "allreduce_coalesced")


def _gloo_op(pg: ReorderingProcessGroup, ctx: Any, op: str, i: int):
    """Issue op number ``i`` of kind ``op`` on rank-dependent inputs.
    Returns (work, the caller's output tensors, their values before, their expected values after)."""
    world, rank = ctx.world_size, ctx.rank
    base = float(100 * i + 1)
    if op == "allreduce":
        out = [torch.full((3,), base + rank)]
        expected = [torch.full((3,), base * world + sum(range(world)))]
        work = pg.allreduce(out, AllreduceOptions())
    elif op == "broadcast":
        out = [torch.full((2,), base + rank)]
        expected = [torch.full((2,), base)]  # from rank 0
        opts = BroadcastOptions()
        opts.rootRank = 0
        work = pg.broadcast(out, opts)
    elif op == "allgather":
        out = [torch.zeros(2) for _ in range(world)]
        expected = [torch.full((2,), base + r) for r in range(world)]
        work = pg.allgather([out], [torch.full((2,), base + rank)], AllgatherOptions())
    elif op == "_allgather_base":
        out = [torch.zeros(world * 2)]
        expected = [torch.cat([torch.full((2,), base + r) for r in range(world)])]
        work = pg._allgather_base(out[0], torch.full((2,), base + rank), AllgatherOptions())
    elif op == "allreduce_coalesced":
        out = [torch.full((2,), base + rank), torch.full((1,), -base - rank)]
        expected = [
            torch.full((2,), base * world + sum(range(world))),
            torch.full((1,), -base * world - sum(range(world))),
        ]
        work = pg.allreduce_coalesced(out, AllreduceCoalescedOptions())
    else:
        out, expected = [], []
        work = pg.barrier(BarrierOptions())
    return work, out, [t.clone() for t in out], expected


def reorder_over_gloo(ctx, order, form, windows):
    """Issue ``windows * n`` ops of every kind through the wrapper, checking at each issue
    that exactly the released works show their results; then wait on all of them."""
    pg = ReorderingProcessGroup(ctx.group, order, work_form=form, stall_timeout=None)
    issued = []
    problems = []
    for i in range(windows * order.n):
        issued.append(_gloo_op(pg, ctx, OPS[i % len(OPS)], i))
        released = set(pg.released_order)
        for j, (work, out, before, _expected) in enumerate(issued):
            shown = out if j in released else before
            if work.get_future().done() != (j in released):
                problems.append(f"after issue {i}: work {j} done={work.get_future().done()}")
            if not all(torch.equal(a, b) for a, b in zip(out, shown, strict=False)):
                problems.append(f"after issue {i}: work {j} data visible={j not in released}")
    for j, (work, out, _, expected) in enumerate(issued):
        work.wait()
        if not all(torch.equal(a, b) for a, b in zip(out, expected, strict=False)):
            problems.append(f"work {j} ({OPS[j % len(OPS)]}): got {out}, expected {expected}")
    pg.close()
    return pg.released_order, problems


@pytest.mark.parametrize("form", FORMS)
@given(order=_orders(max_n=5), windows=st.integers(1, 2))
def test_gloo_works_resolve_in_the_drawn_order(rank_pool, form, order, windows):
    results = rank_pool.run(reorder_over_gloo, order, form, windows)
    for rank, (released, problems) in enumerate(results):
        assert not problems, f"rank {rank}: {problems}"
        assert released == _expected(order, windows), f"rank {rank} released {released}"


def outcomes_over_gloo(ctx, order, form):
    pg = ReorderingProcessGroup(ctx.group, order, work_form=form, stall_timeout=None)
    issued = [_gloo_op(pg, ctx, "allreduce", i) for i in range(order.n)]
    seen = []
    for work, out, before, expected in issued:
        try:
            work.get_future().wait()
            seen.append(("complete", torch.equal(out[0], expected[0])))
        except RuntimeError as exc:
            text = str(exc)
            kind = "fail" if "ScheduledWorkFailure" in text else "drop" if "ScheduledWorkDropped" in text else text
            seen.append((kind, torch.equal(out[0], before[0])))
    pg.close()
    return seen


@pytest.mark.parametrize("form", FORMS)
@given(order=_orders(max_n=4, allow_errors=True, allow_drops=True))
def test_gloo_failures_and_drops(rank_pool, form, order):
    """Failed and dropped works fail their futures and leave the caller's tensors as they were;
    the others deliver the sum.  Every rank still entered every collective."""
    expected = [(order.outcome(i), True) for i in range(order.n)]
    assert rank_pool.run(outcomes_over_gloo, order, form) == [expected] * rank_pool.world_size


def early_wait_over_gloo(ctx, form):
    """Order (2, 0, 1): issue works 0 and 1, wait on 0 (its turn needs the unissued 2)."""
    order = fst.CompletionOrder(3, (("complete", 2), ("complete", 0), ("complete", 1)))
    pg = ReorderingProcessGroup(ctx.group, order, work_form=form, timeout=WAIT_BOUND)
    ops = [_gloo_op(pg, ctx, "allreduce", i) for i in range(2)]
    start = time.monotonic()
    ops[0][0].wait()
    waited = time.monotonic() - start
    ops.append(_gloo_op(pg, ctx, "allreduce", 2))
    ops[2][0].wait()
    correct = all(torch.equal(out[0], expected[0]) for _, out, _, expected in ops)
    pg.close()
    return waited, pg.released_order, [r.trigger for r in pg.release_log], correct


@pytest.mark.parametrize("form", FORMS)
def test_gloo_wait_before_its_turn_is_bounded(rank_pool, form):
    for waited, released, triggers, correct in rank_pool.run(early_wait_over_gloo, form):
        assert waited < WAIT_BOUND and correct
        assert released == [0, 1, 2]
        assert triggers[:2] == (["wait"] * 2 if form == "subclass" else ["stall"] * 2)
