"""allreduce and reduce: every rank's tensor reduced in place (reduce: on the dst rank only)."""

from __future__ import annotations

from typing import Any

from torch._C._distributed_c10d import AllreduceOptions, ReduceOptions

from fuzzdist.conformance.ops._base import Expected, OpCall, OpInfo, Reduction, input_values
from fuzzdist.conformance.ops._buffers import Prepared, options, real, reduce_op_enum
from fuzzdist.problems import Kind, Problem
from fuzzdist.toolkit.checks import raw_bytes
from fuzzdist.toolkit.oracle import show


class AllReduce(OpInfo):
    """``all_reduce``: after it, every rank holds bitwise the same valid reduction."""

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        tensor = p.in_place("the reduced tensor", ctx.rank)
        p.issue = lambda a: pg.allreduce(
            [real(tensor)], options(AllreduceOptions, a, reduceOp=reduce_op_enum(call.reduce_op))
        )
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        xs = [input_values(call, r) for r in range(world)]
        return {r: [("the reduced tensor", Reduction(xs))] for r in range(world)}

    def problems(self, call: OpCall, world: int, observed: list[dict[str, Any]]) -> list[Problem]:
        problems = super().problems(call, world, observed)
        if not problems:
            first = raw_bytes(observed[0]["out"][0])
            for r in range(1, world):
                if raw_bytes(observed[r]["out"][0]) != first:
                    problems.append(
                        Problem(
                            Kind.MISMATCH,
                            rank=r,
                            detail=(
                                f"holds a result that is not bitwise identical to rank 0's: "
                                f"{show(observed[r]['out'][0])} vs {show(observed[0]['out'][0])}"
                            ),
                        )
                    )
        return problems


class Reduce(OpInfo):
    """``reduce``: the dst rank holds a valid reduction; the other ranks' tensors are not checked."""

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        tensor = p.in_place("the reduced tensor", ctx.rank)
        # torch.distributed.reduce passes complex tensors as they are
        p.issue = lambda a: pg.reduce(
            [tensor], options(ReduceOptions, a, reduceOp=reduce_op_enum(call.reduce_op), rootRank=call.root)
        )
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        xs = [input_values(call, r) for r in range(world)]
        return {
            r: [("the reduced tensor (dst)", Reduction(xs)) if r == call.root else ("the tensor (not dst)", None)]
            for r in range(world)
        }


ALLREDUCE = AllReduce("allreduce", "allreduce", "all_reduce", reduces=True, layouts=True)
REDUCE = Reduce("reduce", "reduce", "reduce", reduces=True, root="dst", layouts=True)
