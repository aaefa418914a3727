"""Planted bugs for the functional-collectives property: stand-ins with the signature of a
``torch.distributed._functional_collectives`` function, each wrong only for some inputs.
``functional.check(pool, case, functions={name: fn})`` uses ``fn`` in place of torch's ``name``."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed._functional_collectives as fcol

# the functional all-gather the installed torch has: all_gather_single, or all_gather_tensor (torch 2.6 has
# no all_gather_single; all_gather_tensor is its deprecated alias where both exist)
ALL_GATHER_OP = "all_gather_single" if hasattr(fcol, "all_gather_single") else "all_gather_tensor"
ALL_GATHER = getattr(fcol, ALL_GATHER_OP)


def all_gather_single_ignoring_gather_dim(x: torch.Tensor, gather_dim: int, group: Any, tag: str = "") -> torch.Tensor:
    """A stand-in for :data:`ALL_GATHER_OP`: always gathers along dim 0, then reshapes to the shape a
    gather along ``gather_dim`` has: the right shape, the ranks' pieces interleaved wrongly whenever
    ``gather_dim`` > 0 and a dim before it holds more than one element."""
    world = len(group) if isinstance(group, list) else group.size()
    gathered = fcol.wait_tensor(ALL_GATHER(x, 0, group))
    shape = list(x.shape)
    shape[gather_dim] *= world
    return gathered.reshape(shape)
