"""The all_to_all forms: rank i sends ``splits[i][j]`` rows to rank j, as a list or as one tensor."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import strategies as st
from torch._C._distributed_c10d import AllToAllOptions

from fuzzdist import strategies as fst
from fuzzdist.conformance.ops._base import (
    UNEVEN_VARIANT,
    Capabilities,
    Expected,
    OpCall,
    OpInfo,
    input_values,
    method_name,
)
from fuzzdist.conformance.ops._buffers import Prepared, options, real
from fuzzdist.strategies import TensorSpec
from fuzzdist.toolkit.oracle import show

# Rows one rank sends another in an all-to-all: shrinks to 1; 0 (nothing) is drawn too.
SPLIT_SIZES = st.one_of(st.integers(1, 3), st.just(0))

Splits = tuple[tuple[int, ...], ...]


def chunk_values(call: OpCall, src: int, dst: int) -> torch.Tensor:
    """The rows rank ``src`` sends to rank ``dst``."""
    assert call.splits is not None
    return input_values(call, src, dst, (call.splits[src][dst], *call.spec.shape))


class _AllToAllFamily(OpInfo):
    """``spec`` is one row (contiguous, at most 2-d); the splits are drawn, uneven unless the backend
    refused uneven splits when probed."""

    def specs(
        self,
        dtypes: tuple[torch.dtype, ...],
        caps: Capabilities,
        max_bytes: int,
    ) -> st.SearchStrategy[TensorSpec]:
        return fst.tensor_specs(
            dtypes=st.sampled_from(dtypes), layouts="contiguous", max_bytes=max(16, max_bytes // 8), max_dims=2
        )

    def draw_even(self, d: st.DrawFn, caps: Capabilities) -> bool:
        return not caps.uneven.get(self.name, True)

    def draw_splits(self, d: st.DrawFn, caps: Capabilities) -> tuple[Splits | None, bool]:
        world = caps.world_size
        even = self.draw_even(d, caps)
        if even:
            size = d(SPLIT_SIZES)
            return tuple((size,) * world for _ in range(world)), even
        flat = d(st.lists(SPLIT_SIZES, min_size=world * world, max_size=world * world))
        return tuple(tuple(flat[i * world : (i + 1) * world]) for i in range(world)), even

    def probe_call(self, world: int, spec: TensorSpec, reduce_op: str | None) -> OpCall:
        return self.call(spec, 0, reduce_op=reduce_op, splits=tuple((1,) * world for _ in range(world)))

    def variant_probes(self, world: int, dtype: torch.dtype, reduce_op: str | None) -> list[tuple[str, OpCall]]:
        if world == 1:
            return []
        # every rank sends and receives chunks of different sizes: 1, 2, 1, 2, ...
        splits = tuple(tuple(1 + (i + j) % 2 for j in range(world)) for i in range(world))
        return [(UNEVEN_VARIANT, self.call(TensorSpec((2,), dtype), 0, splits=splits))]

    def input_lines(self, call: OpCall, world: int) -> list[str]:
        return [f"rank {i} -> rank {j}: {show(chunk_values(call, i, j))}" for i in range(world) for j in range(world)]


class AllToAll(_AllToAllFamily):
    """``all_to_all``: lists of tensors, one per peer, each way."""

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        rank, world, splits = ctx.rank, ctx.world_size, call.splits
        assert splits is not None
        inputs = [p.keep(f"input_tensor_list[{j}]", chunk_values(call, rank, j).to(ctx.device)) for j in range(world)]
        outs = [p.output(f"output_tensor_list[{i}]", (splits[i][rank], *call.spec.shape)) for i in range(world)]
        p.issue = lambda a: pg.alltoall([real(o) for o in outs], [real(t) for t in inputs], options(AllToAllOptions, a))
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        return {r: [(f"output_tensor_list[{i}]", chunk_values(call, i, r)) for i in range(world)] for r in range(world)}


class AllToAllSingle(_AllToAllFamily):
    """``all_to_all_single``: one tensor each way, the split sizes as lists (or ``[]`` when even:
    drawn, since a backend must then split evenly itself)."""

    def draw_even(self, d: st.DrawFn, caps: Capabilities) -> bool:
        return super().draw_even(d, caps) or d(st.booleans())

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        rank, world, splits = ctx.rank, ctx.world_size, call.splits
        assert splits is not None
        chunks = [chunk_values(call, rank, j) for j in range(world)]
        tensor = p.keep("the input tensor", torch.cat(chunks).to(ctx.device))
        received = sum(splits[i][rank] for i in range(world))
        output = p.output("the output tensor", (received, *call.spec.shape))
        if call.even_splits:
            in_splits: list[int] = []
            out_splits: list[int] = []
        else:
            in_splits = [splits[rank][j] for j in range(world)]
            out_splits = [splits[i][rank] for i in range(world)]
        fn = getattr(pg, self.method)
        p.issue = lambda a: fn(real(output), real(tensor), out_splits, in_splits, options(AllToAllOptions, a))
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        return {
            r: [("the output tensor", torch.cat([chunk_values(call, i, r) for i in range(world)]))]
            for r in range(world)
        }

    def describe_args(self, call: OpCall) -> list[str]:
        parts = super().describe_args(call)
        if call.even_splits and call.splits is not None:
            parts = [p + " (even: sizes passed as [])" if p.startswith("splits=") else p for p in parts]
        return parts


ALLTOALL = AllToAll("alltoall", "alltoall", "all_to_all", rows=True)
ALLTOALL_BASE = AllToAllSingle(
    "alltoall_base", method_name("all_to_all_single", "alltoall_base"), "all_to_all_single", rows=True
)
