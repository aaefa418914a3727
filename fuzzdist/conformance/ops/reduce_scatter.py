"""The reduce_scatter forms: rank r receives the reduction of every rank's slot r."""

from __future__ import annotations

from typing import Any

import torch
from torch._C._distributed_c10d import ReduceScatterOptions

from fuzzdist.conformance.ops._base import (
    Expected,
    OpCall,
    OpInfo,
    Reduction,
    input_values,
    method_name,
)
from fuzzdist.conformance.ops._buffers import Prepared, options, reduce_op_enum
from fuzzdist.toolkit.oracle import show


class _ReduceScatterFamily(OpInfo):
    """Rank r's input slot j is ``spec`` with ``input_seed(seed, r, j)``; rank r gets slot r reduced."""

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        return {
            r: [("the output tensor", Reduction([input_values(call, i, r) for i in range(world)]))]
            for r in range(world)
        }

    def input_lines(self, call: OpCall, world: int) -> list[str]:
        return [f"rank {i} slot {j}: {show(input_values(call, i, j))}" for i in range(world) for j in range(world)]


class ReduceScatter(_ReduceScatterFamily):
    """``reduce_scatter``: a list of inputs (one per rank) on every rank."""

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        rank, world = ctx.rank, ctx.world_size
        inputs = [p.keep(f"input_list[{j}]", input_values(call, rank, j).to(ctx.device)) for j in range(world)]
        output = p.output("the output tensor", call.spec.shape)
        p.issue = lambda a: pg.reduce_scatter(
            [output], [inputs], options(ReduceScatterOptions, a, reduceOp=reduce_op_enum(call.reduce_op))
        )
        return p


class ReduceScatterTensor(_ReduceScatterFamily):
    """``reduce_scatter_tensor``: the inputs concatenated along dim 0 into one tensor, or (form
    ``"stack"``, which torch.distributed also documents) stacked along a new dim 0."""

    needs_dim0 = True

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        slots = [input_values(call, ctx.rank, j) for j in range(ctx.world_size)]
        joined = torch.stack(slots) if call.form == "stack" else torch.cat(slots)
        tensor = p.keep("the input tensor", joined.to(ctx.device))
        output = p.output("the output tensor", call.spec.shape)
        fn = getattr(pg, self.method)
        p.issue = lambda a: fn(
            output, tensor, options(ReduceScatterOptions, a, reduceOp=reduce_op_enum(call.reduce_op))
        )
        return p


REDUCE_SCATTER = ReduceScatter("reduce_scatter", "reduce_scatter", "reduce_scatter", reduces=True)
REDUCE_SCATTER_TENSOR = ReduceScatterTensor(
    "reduce_scatter_tensor",
    method_name("reduce_scatter_single", "_reduce_scatter_base"),
    "reduce_scatter_tensor",
    reduces=True,
    forms=("stack",),
)
REDUCE_SCATTER_BASE = ReduceScatterTensor(
    "_reduce_scatter_base", "_reduce_scatter_base", "ProcessGroup._reduce_scatter_base (C++ callers)", reduces=True
)
