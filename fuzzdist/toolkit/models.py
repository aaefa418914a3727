"""The reference models training properties build: filled from a generator of their own, so every rank
builds the same model for the same seed and the global RNG is left alone; and the step a model under test and
its reference take together."""

from __future__ import annotations

import math

import torch
from torch import nn


def init_uniform_(model: nn.Module, gen: torch.Generator) -> nn.Module:
    """Fill ``model``'s parameters in place, in their order, uniformly in ``±1/sqrt(fan_in)`` (a bias: its
    length), drawn in float64 from ``gen`` (so the values don't depend on the model's dtype); ``model``."""
    with torch.no_grad():
        for p in model.parameters():
            bound = 1.0 / math.sqrt(p.shape[-1] if p.dim() > 1 else p.numel())
            p.copy_((torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound)
    return model


def step_together(*optimizers: torch.optim.Optimizer) -> None:
    """``step()`` every optimizer, then ``zero_grad(set_to_none=True)`` every one: the model under test and its
    local reference take the same optimizer step from the gradients each holds, and start the next without any."""
    for optimizer in optimizers:
        optimizer.step()
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
