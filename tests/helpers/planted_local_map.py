"""Planted bugs for the local_map property: a faulty ``local_map``, wrong only for some inputs.
``local_map.check(..., local_map_fn=fn)`` calls ``fn(func, out_placements=, in_placements=, redistribute_inputs=)``
on every rank."""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor.experimental import local_map


def never_refuses(func: Any, *, out_placements: Any, in_placements: Any, redistribute_inputs: bool) -> Any:
    """Redistributes an input whose placements differ from ``in_placements`` even with
    ``redistribute_inputs=False``, where ``local_map`` documents a ValueError."""
    return local_map(func, out_placements=out_placements, in_placements=in_placements, redistribute_inputs=True)
