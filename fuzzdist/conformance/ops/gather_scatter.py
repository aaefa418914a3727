"""gather and scatter: every rank's tensor into a list on the dst rank, and the reverse from src."""

from __future__ import annotations

from typing import Any

import torch
from torch._C._distributed_c10d import GatherOptions, ScatterOptions

from fuzzdist.conformance.ops._base import Expected, OpCall, OpInfo, input_seed, input_values
from fuzzdist.conformance.ops._buffers import Prepared, main_input, options, real
from fuzzdist.problems import Problem, Symptom
from fuzzdist.toolkit.checks import bitwise_equal, storage_order
from fuzzdist.toolkit.oracle import show

_SLOT = "gather_list["


class Gather(OpInfo):
    """``gather``: only the dst rank passes (and gets) an output list."""

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        tensor = p.keep("the input tensor", main_input(call, ctx.rank, ctx.device)[0])
        output_tensors = []
        if ctx.rank == call.root:
            output_tensors.append([p.output(f"gather_list[{i}]", call.spec.shape) for i in range(ctx.world_size)])
        p.issue = lambda a: pg.gather(output_tensors, [tensor], options(GatherOptions, a, rootRank=call.root))
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        xs = [input_values(call, r) for r in range(world)]
        return {r: [(f"{_SLOT}{i}]", xs[i]) for i in range(world)] if r == call.root else [] for r in range(world)}

    def compare(self, call: OpCall, what: str, expected: Expected, actual: torch.Tensor) -> Problem | None:
        """The plain comparison; where a slot from a non-contiguous input is wrong, whether it holds exactly
        that input's memory order (:attr:`~fuzzdist.problems.Symptom.MEMORY_ORDER`: a backend that ignores
        the input's strides) (so the known-bug registry can tell gloo's stride bug from others)."""
        problem = super().compare(call, what, expected, actual)
        if problem is None or call.spec.layout == "contiguous" or not what.startswith(_SLOT):
            return problem
        source = int(what[len(_SLOT) : -1])
        in_memory_order = storage_order(call.spec.materialize("cpu", input_seed(call.seed, source, 0)))
        if in_memory_order is None or not bitwise_equal(actual, in_memory_order):
            return problem
        return problem.with_symptom(Symptom.MEMORY_ORDER)


class Scatter(OpInfo):
    """``scatter``: only the src rank passes an input list (slot j for rank j)."""

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        rank = ctx.rank
        output = p.output("the output tensor", call.spec.shape)
        input_tensors = []
        if rank == call.root:
            pieces = [
                p.keep(f"scatter_list[{j}]", input_values(call, rank, j).to(ctx.device)) for j in range(ctx.world_size)
            ]
            input_tensors.append([real(t) for t in pieces])
        p.issue = lambda a: pg.scatter([real(output)], input_tensors, options(ScatterOptions, a, rootRank=call.root))
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        assert call.root is not None
        return {r: [("the output tensor", input_values(call, call.root, r))] for r in range(world)}

    def input_lines(self, call: OpCall, world: int) -> list[str]:
        root = call.root
        assert root is not None
        return [f"rank {root} slot {j}: {show(input_values(call, root, j))}" for j in range(world)]


GATHER = Gather("gather", "gather", "gather", root="dst", layouts=True)
SCATTER = Scatter("scatter", "scatter", "scatter", root="src")
