"""send/recv: rank src sends its tensor to rank dst (tag 0); the other ranks take no part."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.conformance.ops._base import Expected, OpCall, OpInfo, input_values
from fuzzdist.conformance.ops._buffers import Prepared, main_input, real
from fuzzdist.strategies import TensorSpec


class SendRecv(OpInfo):
    """``send`` + ``recv``: ``root`` is the sender, ``peer`` the receiver (another rank)."""

    def draw_roots(self, d: st.DrawFn, world: int) -> tuple[int | None, int | None]:
        root = d(fst.source_ranks(world))
        other = d(fst.source_ranks(world - 1))
        return root, (other if other < root else other + 1)

    def probe_call(self, world: int, spec: TensorSpec, reduce_op: str | None) -> OpCall:
        return self.call(spec, 0, reduce_op=reduce_op, root=0, peer=1)

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        if ctx.rank == call.root:
            tensor = p.keep("the sent tensor", main_input(call, ctx.rank, ctx.device)[0])
            p.issue = lambda a: pg.send([real(tensor)], call.peer, 0)
        elif ctx.rank == call.peer:
            output = p.output("the received tensor", call.spec.shape)
            p.issue = lambda a: pg.recv([real(output)], call.root, 0)
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        assert call.root is not None
        return {
            r: [("the received tensor", input_values(call, call.root))] if r == call.peer else [] for r in range(world)
        }

    def describe_roots(self, call: OpCall) -> list[str]:
        return [f"src={call.root}, dst={call.peer}"]


SEND_RECV = SendRecv("send_recv", "send/recv", "send + recv", root="src", min_world=2, layouts=True)
