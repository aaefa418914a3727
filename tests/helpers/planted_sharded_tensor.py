"""Planted bugs for the ShardedTensor property (``fuzzdist.properties.sharded_tensor``): a gather
that is wrong only for some placements.  It has the signature of the ``gather`` keyword it replaces
(``gather(sharded, dst, out)``) and delegates the communication to torch."""

from __future__ import annotations

from typing import Any

import torch


def gather_in_rank_order(sharded: Any, dst: int, out: torch.Tensor | None) -> None:
    """ShardedTensor.gather (passing the tensor's dtype, so the known float32 rounding stays out), then
    the pieces rearranged so that rank r's shard lands where placement r belongs: right only when
    the placements are in rank order."""
    sharded.gather(dst=dst, out=out, dtype=sharded.local_shards()[0].tensor.dtype)
    if out is None:
        return
    spec = sharded.sharding_spec()
    dim = spec.dim % out.ndim
    ranks = [p.rank() for p in spec.placements]
    pieces = torch.chunk(out.clone(), len(ranks), dim)  # pieces[i]: placement i's shard
    by_rank = [pieces[ranks.index(r)] for r in range(len(ranks)) if ranks.index(r) < len(pieces)]
    if by_rank and sum(p.shape[dim] for p in by_rank) == out.shape[dim]:
        out.copy_(torch.cat(by_rank, dim))
