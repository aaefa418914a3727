"""The all_gather forms: a list of tensors, or one tensor (concatenated along dim 0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch._C._distributed_c10d import AllgatherOptions

from fuzzdist.conformance.ops._base import Expected, OpCall, OpInfo, input_values, method_name
from fuzzdist.conformance.ops._buffers import Prepared, main_input, options, real


class AllGather(OpInfo):
    """``all_gather``: every rank's tensor, in rank order, into a list on every rank."""

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        tensor = p.keep("the input tensor", main_input(call, ctx.rank, ctx.device)[0])
        outs = [p.output(f"output_tensor_list[{i}]", call.spec.shape) for i in range(ctx.world_size)]
        p.issue = lambda a: pg.allgather([[real(o) for o in outs]], [real(tensor)], options(AllgatherOptions, a))
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        xs = [input_values(call, r) for r in range(world)]
        return {r: [(f"output_tensor_list[{i}]", xs[i]) for i in range(world)] for r in range(world)}


@dataclass(frozen=True)
class AllGatherIntoTensor(OpInfo):
    """``all_gather_into_tensor``: every rank's tensor concatenated along dim 0 (the layout every
    backend takes; gloo aborts the process on the stacked one).  ``real_views``: complex tensors
    are passed as real views, as torch.distributed does (C++ callers of ``_allgather_base`` don't)."""

    real_views: bool = True
    needs_dim0 = True

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        spec = call.spec
        tensor = p.keep("the input tensor", main_input(call, ctx.rank, ctx.device)[0])
        output = p.output("the output tensor", (ctx.world_size * spec.shape[0], *spec.shape[1:]))
        fn = getattr(pg, self.method)
        view = real if self.real_views else (lambda t: t)
        p.issue = lambda a: fn(view(output), view(tensor), options(AllgatherOptions, a))
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        gathered = torch.cat([input_values(call, r) for r in range(world)])
        return {r: [("the output tensor", gathered)] for r in range(world)}


ALLGATHER = AllGather("allgather", "allgather", "all_gather", layouts=True)
ALLGATHER_INTO_TENSOR = AllGatherIntoTensor(
    "allgather_into_tensor", method_name("all_gather_single", "_allgather_base"), "all_gather_into_tensor", layouts=True
)
ALLGATHER_BASE = AllGatherIntoTensor(
    "_allgather_base", "_allgather_base", "ProcessGroup._allgather_base (C++ callers)", layouts=True, real_views=False
)
