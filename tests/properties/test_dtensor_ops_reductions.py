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


def test_softmax_bounds_its_gradient_not_only_its_output():
    # softmax's gradient y_i (g_i - sum_j g_j y_j) is rounded like any sum: its bound must come from the
    # magnitude's derivative (|g_i| + sum_j |g_j| along dim), or the gradients are compared bitwise and a
    # 1-ulp difference between a shard's kernel and the whole tensor's is reported as a wrong result
    from fuzzdist.properties.dtensor_ops.catalogue import lookup

    softmax = lookup("nn.softmax")
    x = torch.tensor([[0.5, 2.0, 1.0], [3.0, 0.0, 1.5]], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([[1.0, -2.0, 4.0], [0.5, 0.25, -1.0]], dtype=torch.float64)
    magnitude = softmax.magnitude(x, 1)
    assert torch.equal(magnitude.detach(), torch.ones_like(x))  # every output is at most 1
    (grad,) = torch.autograd.grad(magnitude, x, g.abs())
    assert torch.allclose(grad, g.abs() + g.abs().sum(1, keepdim=True))
    y = torch.softmax(x.detach(), 1)
    true_terms = y * g.abs() + y * (g.abs() * y).sum(1, keepdim=True)
    assert (grad >= true_terms).all()


def test_a_view_that_would_reshape_a_sharded_dim_is_dtensors_explicit_refusal():
    from fuzzdist.properties.dtensor_ops.ranks import refused

    words = (
        "This operation would remove or reshape sharded dimension 0, which requires redistribution. "
        "Please redistribute the input first."
    )
    assert refused(RuntimeError(words))
    assert not refused(RuntimeError("view size is not compatible with input tensor's size and stride"))
