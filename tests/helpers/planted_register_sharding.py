"""A planted bug for the local_map property's ``register_sharding`` half: a wrong sharding strategy for its
pointwise custom op, wrong only for some inputs.  ``local_map.check(..., sharding=fn)`` registers ``fn`` for
an op of its own on every rank."""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor import Replicate, Shard


def sharded_in_replicated_out(x: Any) -> list[tuple[list[Any], list[Any]]]:
    """Declares the op's output replicated whatever its input's placement, as if the op gathered its input:
    right for a replicated input, wrong for a sharded one (each rank's output is only its own shard's)."""
    return [([Replicate()], [Replicate()])] + [([Replicate()], [Shard(d)]) for d in range(x.ndim)]
