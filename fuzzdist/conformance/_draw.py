"""Hypothesis strategies for the async check: several calls in flight, waited in a drawn order.

A single op's calls are drawn by its definition (``OpInfo.calls``, ``fuzzdist.conformance.ops``).
"""

from __future__ import annotations

from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.conformance.ops import OPS, Capabilities, OpCall


def programs(
    caps: Capabilities, ops: tuple[str, ...], max_bytes: int, max_calls: int = 4, repeat_waits: bool = False
) -> st.SearchStrategy[tuple[tuple[OpCall, ...], fst.CompletionOrder]]:
    """2 to ``max_calls`` calls of ``ops`` issued asynchronously, and the order their works are waited in
    (a ``CompletionOrder``: each work waited on once, in its resolution order; with
    ``repeat_waits``, extra waits on works already waited on).

    Shrinks to two calls of the first op, waited in issue order.
    """
    single = st.one_of([OPS[op].calls(caps, max_bytes) for op in ops])

    @st.composite
    def draw(d: st.DrawFn) -> tuple[tuple[OpCall, ...], fst.CompletionOrder]:
        n = d(st.integers(2, max_calls))
        calls = tuple(d(single) for _ in range(n))
        order = d(fst.completion_orders(n, allow_errors=False, allow_drops=False, allow_waits=repeat_waits))
        return calls, order

    return draw()


def wait_sequence(order: fst.CompletionOrder) -> tuple[int, ...]:
    """The waits a CompletionOrder describes from the caller's side: every step is a wait."""
    return tuple(index for _, index in order.steps)
