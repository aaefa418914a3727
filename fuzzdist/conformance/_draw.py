"""Hypothesis strategies for conformance examples, restricted to what the backend supports."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.conformance._calls import OPS, OpCall

SEEDS = st.integers(0, 2**32 - 1)
# Output views start 0 elements (shrinks here) or a few elements into their buffers.
OUT_OFFSETS = st.one_of(st.just(0), st.integers(1, 8))
# Rows one rank sends another in an all-to-all: shrinks to 1; 0 (nothing) is drawn too.
SPLIT_SIZES = st.one_of(st.integers(1, 3), st.just(0))
# The tensor forms use the concatenation layout (dim 0 is world_size times the per-rank
# dim 0), the one every backend takes; gloo aborts the process on the stack form.
CONCAT_OPS = frozenset({"allgather_into_tensor", "_allgather_base", "reduce_scatter_tensor", "_reduce_scatter_base"})


@dataclass
class Capabilities:
    """What the probes found the backend implements at one world size."""

    world_size: int
    # (op, reduce op or None) -> the dtypes it accepted, in fuzzdist's shrink order
    dtypes: dict[tuple[str, str | None], tuple[torch.dtype, ...]] = field(default_factory=dict)
    layouts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # op -> layouts it accepted
    hung: dict[str, str] = field(default_factory=dict)  # op -> what happened when it was probed
    uneven: dict[str, bool] = field(default_factory=dict)  # all-to-all op -> False if uneven splits refused

    def reduce_ops(self, op: str) -> tuple[str, ...]:
        return tuple(r for (o, r), d in self.dtypes.items() if o == op and r is not None and d)

    def available(self, op: str) -> bool:
        info = OPS[op]
        if self.world_size < info.min_world or op in self.hung:
            return False
        if op == "barrier":
            return bool(self.dtypes.get(("barrier", None)))
        if info.reduces:
            return bool(self.reduce_ops(op))
        return bool(self.dtypes.get((op, None)))


def op_calls(op: str, caps: Capabilities, max_bytes: int, reduce_op: str | None = None,
             ) -> st.SearchStrategy[OpCall]:
    """Calls of ``op`` at ``caps.world_size`` ranks, over the dtypes and layouts it supports
    (with ``reduce_op``, or a drawn one).

    Shrinks towards the first reduce op (SUM), a one-element float32 tensor,
    root 0 (send/recv: 0 -> 1), one row each way, no output offset, seed 0.
    """
    info = OPS[op]
    world = caps.world_size

    @st.composite
    def draw(d: st.DrawFn) -> OpCall:
        if op == "barrier":
            return OpCall("barrier", late_rank=d(fst.source_ranks(world)))
        chosen = reduce_op
        if info.reduces and chosen is None:
            chosen = d(st.sampled_from(caps.reduce_ops(op)))
        dtypes = caps.dtypes[(op, chosen)]
        layouts = caps.layouts.get(op, ("contiguous",)) if info.layouts else ("contiguous",)
        if info.rows:
            spec = d(fst.tensor_specs(dtypes=st.sampled_from(dtypes), layouts="contiguous",
                                      max_bytes=max(16, max_bytes // 8), max_dims=2))
        else:
            specs = fst.tensor_specs(dtypes=st.sampled_from(dtypes), layouts=layouts, max_bytes=max_bytes)
            if op in CONCAT_OPS:  # input/output concatenated along dim 0: needs a dim 0
                specs = specs.filter(lambda s: s.ndim >= 1)
            spec = d(specs)
        root = peer = None
        if op == "send_recv":
            root = d(fst.source_ranks(world))
            other = d(fst.source_ranks(world - 1))
            peer = other if other < root else other + 1
        elif info.root is not None:
            root = d(fst.source_ranks(world))
        splits = None
        even = False
        if info.rows:
            even = not caps.uneven.get(op, True) or (op == "alltoall_base" and d(st.booleans()))
            if even:
                size = d(SPLIT_SIZES)
                splits = tuple((size,) * world for _ in range(world))
            else:
                flat = d(st.lists(SPLIT_SIZES, min_size=world * world, max_size=world * world))
                splits = tuple(tuple(flat[i * world:(i + 1) * world]) for i in range(world))
        out_offset = d(OUT_OFFSETS)
        seed = d(SEEDS)
        return OpCall(op, spec, seed, reduce_op=chosen, root=root, peer=peer, splits=splits,
                      even_splits=even, out_offset=out_offset)

    return draw()


def programs(caps: Capabilities, ops: tuple[str, ...], max_bytes: int, max_calls: int = 4,
             repeat_waits: bool = False) -> st.SearchStrategy[tuple[tuple[OpCall, ...], fst.CompletionOrder]]:
    """2 to ``max_calls`` calls issued asynchronously, and the order their works are waited in
    (a ``CompletionOrder``: each work waited on once, in its resolution order; with
    ``repeat_waits``, extra waits on works already waited on).

    Shrinks to two calls of the first op, waited in issue order.
    """
    single = st.one_of([op_calls(op, caps, max_bytes) for op in ops])

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
