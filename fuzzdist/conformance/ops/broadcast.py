"""broadcast: the src rank's tensor, in place on every rank."""

from __future__ import annotations

from typing import Any

from torch._C._distributed_c10d import BroadcastOptions

from fuzzdist.conformance.ops._base import Expected, OpCall, OpInfo, input_values
from fuzzdist.conformance.ops._buffers import Prepared, options, real


class Broadcast(OpInfo):
    """``broadcast``: every rank starts from its own values and ends with src's, bit-exact."""

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        tensor = p.in_place("the broadcast tensor", ctx.rank)
        p.issue = lambda a: pg.broadcast([real(tensor)], options(BroadcastOptions, a, rootRank=call.root, rootTensor=0))
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        assert call.root is not None
        source = input_values(call, call.root)
        return {r: [("the broadcast tensor", source)] for r in range(world)}


BROADCAST = Broadcast("broadcast", "broadcast", "broadcast", root="src", layouts=True)
