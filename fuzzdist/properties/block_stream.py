"""Blocked streams: an event recorded after k ``Work.block_current_stream()`` calls completes only
once every one of those Works has resolved (completed or failed), whatever the order.

Generalises torch's ``test_block_current_stream`` in ``test_c10d_pypg.py`` (seed 002: one Work,
completed by hand) to up to six Works completed, failed, dropped or waited on in any order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.pool.rank.rank_state import watch_pending
from fuzzdist.problems import Kind, Problem, by_rank
from fuzzdist.properties import PropertyFailure

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

POLL_S = 0.02  # how long the GPU gets to (wrongly) run past a block that still holds
RELEASE_S = 5.0  # how long a stream may take to run on once its last block is released
ORDERS = st.integers(1, 6).flatmap(fst.completion_orders)  # 1 to 6 Works, resolved in any order


class BlockWork(dist._Work):
    """A Work whose future the test resolves by hand (the seed test's BlockWork)."""

    def __init__(self) -> None:
        super().__init__()
        self.future_: torch.futures.Future[None] = torch.futures.Future()

    def get_future(self) -> torch.futures.Future[None]:
        """The future the test resolves by hand."""
        return self.future_


class BlockedStream:
    """The Works blocking one stream, as a hang's explanation names them (a ``PendingWorkSource``)."""

    def __init__(self, stream: Any, order: fst.CompletionOrder) -> None:
        self.stream = stream
        self.order = order
        self.futures: list[torch.futures.Future[Any]] = []
        watch_pending(self)  # held weakly: registered for as long as the example keeps it

    def fuzzdist_pending_works(self) -> list[str]:
        """One line per Work whose future is still unresolved, with the drawn steps."""
        return [
            f"Work {i} blocks {self.stream}: its future is unresolved (the drawn steps: {self.order.steps})"
            for i, future in enumerate(self.futures)
            if not future.done()
        ]


def make_block_work(index: int) -> BlockWork:
    """The ``index``-th Work of an example: a fresh :class:`BlockWork` (``check``'s default)."""
    return BlockWork()


def check_blocked_stream(
    ctx: RankContext, order: fst.CompletionOrder, make_work: Callable[[int], Any] = make_block_work
) -> list[Problem]:
    """Block one stream with ``order.n`` Works, resolve them as ``order`` says; report violations.

    Dropped Works lose their last Python reference while unresolved: the
    stream must stay blocked until their futures resolve, which the guard at
    the end does, so no example leaves the GPU blocked.
    """
    problems: list[Problem] = []
    after = None  # the event recorded behind the blocks
    stream = torch.cuda.Stream(device=ctx.device)
    blocked = BlockedStream(stream, order)  # a hang names the Works still blocking the stream
    futures = blocked.futures
    torch.cuda.synchronize(ctx.device)
    try:
        works = []
        with torch.cuda.stream(stream):
            for i in range(order.n):
                work = make_work(i)
                work.block_current_stream()
                works.append(work)
                futures.append(work.get_future())
            after = torch.cuda.Event()
            after.record(stream)
        unresolved = set(range(order.n))
        for action, i in order.steps:
            time.sleep(POLL_S)
            if unresolved and after.query():
                problems.append(
                    Problem(
                        Kind.HANG,
                        "stream",
                        detail=f"ran on before step {action} {i} with Works {sorted(unresolved)} unresolved",
                    )
                )
                break
            if action == "complete":
                futures[i].set_result(None)
                unresolved.discard(i)
            elif action == "fail":
                futures[i].set_exception(RuntimeError(f"planted failure of Work {i}"))
                unresolved.discard(i)
            elif action == "drop":
                works[i] = None  # the Work object goes; its block must hold until its future resolves
            elif action == "wait":
                try:
                    futures[i].wait()
                except RuntimeError:
                    pass  # a failed Work's wait raises: expected
        time.sleep(POLL_S)
        if unresolved and after.query() and not problems:
            problems.append(
                Problem(Kind.HANG, "stream", detail=f"ran on with dropped Works {sorted(unresolved)} never resolved")
            )
    finally:
        for future in futures:  # the guard: never leave the GPU stream blocked
            if not future.done():
                future.set_result(None)
        deadline = time.monotonic() + RELEASE_S
        while after is not None and not after.query() and time.monotonic() < deadline:
            time.sleep(0.005)
        if after is not None and not after.query():
            problems.append(
                Problem(Kind.HANG, "stream", detail=f"still blocked {RELEASE_S:g}s after every Work resolved")
            )
            ctx.request_recycle("a GPU stream stayed blocked")
    return problems


def check(pool: Pool, order: fst.CompletionOrder, *, make_work: Callable[[int], Any] = make_block_work) -> None:
    """Block a stream on every rank with ``order.n`` Works made by ``make_work(i)``, resolve them as
    ``order`` says; raise :class:`PropertyFailure` with every rank's problems if the stream ran on
    early or stayed blocked."""
    problems = pool.run(check_blocked_stream, order, make_work=make_work)
    if problems != [[]] * pool.world_size:
        raise PropertyFailure(f"a blocked stream broke its contract:{by_rank(dict(enumerate(problems)))}", problems)
