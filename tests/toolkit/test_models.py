"""Reference models are filled from their own generator: the same seed gives the same model, whatever the
global RNG or the model's dtype."""

from __future__ import annotations

import math

import torch
from torch import nn

from fuzzdist.toolkit.models import init_uniform_, step_together


def _model(dtype: torch.dtype, seed: int) -> nn.Module:
    return init_uniform_(
        nn.Sequential(nn.Linear(3, 4, dtype=dtype), nn.Linear(4, 2, dtype=dtype)), torch.Generator().manual_seed(seed)
    )


def test_the_same_seed_gives_the_same_parameters_and_leaves_the_global_rng_alone():
    first, second = _model(torch.float64, 7), _model(torch.float64, 7)
    state = torch.get_rng_state()
    init_uniform_(first, torch.Generator().manual_seed(7))  # nn.Linear's own init draws globally; this doesn't
    assert torch.equal(torch.get_rng_state(), state)
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(next(_model(torch.float64, 8).parameters()), next(first.parameters()))


def test_values_lie_within_one_over_root_fan_in_and_match_across_dtypes():
    wide, narrow = _model(torch.float64, 3), _model(torch.float32, 3)
    for p, q in zip(wide.parameters(), narrow.parameters(), strict=True):
        fan_in = p.shape[-1] if p.dim() > 1 else p.numel()
        assert bool((p.abs() <= 1 / math.sqrt(fan_in)).all())
        assert torch.equal(p.float(), q)  # drawn in float64 then rounded: the dtype doesn't change the draw


def test_models_stepped_together_move_alike_and_are_left_without_gradients():
    model, reference = _model(torch.float64, 3), _model(torch.float64, 3)
    optimizers = [torch.optim.Adam(m.parameters(), lr=0.1) for m in (model, reference)]
    for m in (model, reference):
        m(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
    before = [p.detach().clone() for p in model.parameters()]
    step_together(*optimizers)
    for p, q, old in zip(model.parameters(), reference.parameters(), before, strict=True):
        assert p.grad is None and q.grad is None
        assert torch.equal(p, q) and not torch.equal(p, old)
