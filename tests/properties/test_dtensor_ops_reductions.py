"""The reduction generators draw only arguments the local operator accepts: an invalid draw would be reported
as a bug in fuzzdist's generator, not tested against DTensor."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import lookup


@settings(max_examples=300, deadline=None)
@given(data=st.data(), name=st.sampled_from(["reductions.amax", "reductions.amin", "reductions.norm_inf"]))
def test_extrema_of_empty_operands_are_drawn_only_over_sized_dims(data, name):
    op = lookup(name)
    assert op is not None
    args, kwargs = data.draw(op.arguments())
    local = [a.full() for a in args]
    # for (0,), amax raised "Expected reduction dim to be specified", norm_inf "cannot compute the inf norm"
    result = op.call(*local, **kwargs)
    assert isinstance(result, torch.Tensor)
