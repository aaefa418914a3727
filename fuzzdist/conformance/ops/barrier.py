"""barrier: no rank leaves it before every rank has entered it (one drawn rank arrives late)."""

from __future__ import annotations

import time
from typing import Any

import torch
from hypothesis import strategies as st
from torch._C._distributed_c10d import BarrierOptions

from fuzzdist import strategies as fst
from fuzzdist.conformance.ops._base import Capabilities, Expected, OpCall, OpInfo
from fuzzdist.conformance.ops._buffers import Prepared, options
from fuzzdist.problems import Kind, Problem

LATE_ARRIVAL_S = 0.02  # how late the late rank arrives


class Barrier(OpInfo):
    """``barrier``: each rank counts itself in on the pool's store before entering, and reads the
    count after leaving; every rank must have counted all of them."""

    @property
    def needs_dtypes(self) -> bool:
        return False

    def draw(self, d: st.DrawFn, caps: Capabilities, max_bytes: int, reduce_op: str | None) -> OpCall:
        return self.call(late_rank=d(fst.source_ranks(caps.world_size)))

    def probes(
        self,
        world: int,
        dtypes: tuple[torch.dtype, ...],
        kinds: dict[torch.dtype, str],
    ) -> list[tuple[str | None, torch.dtype | None, OpCall]]:
        return [(None, None, self.call())]

    def prepare(self, ctx: Any, pg: Any, call: OpCall, index: int) -> Prepared:
        p = Prepared(call, ctx.device)
        rank, device, store = ctx.rank, ctx.device, ctx.store
        key = f"fuzzdist/barrier/{index}"

        def issue(async_op: bool) -> Any:
            if rank == call.late_rank:
                time.sleep(LATE_ARRIVAL_S)
            store.add(key, 1)
            opts = options(BarrierOptions, async_op)
            opts.device = device if device.type != "cpu" else torch.device("cpu")
            return pg.barrier(opts)

        p.issue = issue
        p.after = lambda: store.add(key, 0)  # ranks that had arrived when this one left the barrier
        return p

    def expected(self, call: OpCall, world: int) -> dict[int, list[tuple[str, Expected]]]:
        return {r: [] for r in range(world)}

    def problems(self, call: OpCall, world: int, observed: list[dict[str, Any]]) -> list[Problem]:
        problems = super().problems(call, world, observed)
        for r, obs in enumerate(observed):
            if obs["value"] != world:
                late = f" (rank {call.late_rank} arrived late)" if call.late_rank is not None else ""
                problems.append(
                    Problem(
                        Kind.HANG,
                        rank=r,
                        got=obs["value"],
                        expected=world,
                        detail=(f"left the barrier when only {obs['value']} of {world} ranks had entered it{late}"),
                    )
                )
        return problems

    def input_lines(self, call: OpCall, world: int) -> list[str]:
        return []

    def describe_args(self, call: OpCall) -> list[str]:
        return [f"late_rank={call.late_rank}"] if call.late_rank is not None else []


BARRIER = Barrier("barrier", "barrier", "barrier")
