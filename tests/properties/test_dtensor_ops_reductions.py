"""The reduction generators draw only arguments the local operator accepts: an invalid draw would be reported
as a bug in fuzzdist's generator, not tested against DTensor."""

from __future__ import annotations

import pytest
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


def _normalisation_gradient_terms(x, weight, g, centred):
    """Each input gradient element's terms in absolute value, in float64, from the documented computation:
    ``(w_i g_i - [mean_j(w_j g_j)] - h_i mean_j(w_j g_j h_j)) / s`` along the last dim."""
    n = x.shape[-1]
    c = x - x.mean(-1, keepdim=True) if centred else x
    s = (c.square().mean(-1, keepdim=True) + (1e-5 if centred else torch.finfo(torch.float32).eps)).sqrt()
    h, wg = c / s, (weight * g).abs()
    mean_term = wg.mean(-1, keepdim=True) if centred else 0
    return (wg + mean_term + h.abs() * (wg * h.abs()).sum(-1, keepdim=True) / n) / s


@pytest.mark.parametrize("name", ["nn.rms_norm", "nn.layer_norm"])
def test_normalisations_bound_their_input_gradient_not_only_their_output(name):
    # the gradient of a normalisation is a difference of terms far larger than itself: its bound must come
    # from the magnitude's derivative, or the input gradients are compared bitwise and a reordered sum in
    # DTensor's backward is reported as a wrong result
    op = lookup(name)
    x = torch.tensor([[0.5, -2.0, 1.0], [3.0, 0.0, -1.5], [1e-3, 2e-3, -4e-3]], dtype=torch.float64)
    weight = torch.tensor([0.5, -3.0, 1.25], dtype=torch.float64)
    g = torch.tensor([[1.0, -2.0, 4.0], [0.5, 0.25, -1.0], [-7.0, 3.0, 0.125]], dtype=torch.float64)
    leaf = x.abs().requires_grad_()
    magnitude = op.magnitude(leaf, (3,), weight.abs())
    assert torch.equal(magnitude.detach(), torch.full_like(x, 3**0.5) * weight.abs())  # the value as before
    (grad,) = torch.autograd.grad(magnitude, leaf, g.abs())
    assert (grad >= _normalisation_gradient_terms(x, weight, g, centred=name == "nn.layer_norm")).all()


def test_rms_norm_of_a_partial_input_allows_its_reordered_gradient():
    # a 3-rank campaign's example: a Partial (2,) float32 input whose DTensor gradient differs from local
    # autograd's by one unit in the last place of its terms (about 139 each, cancelling to -0.0576)
    from fuzzdist.properties.dtensor_ops.accuracy import bound

    x = torch.tensor([0.03997147083282471, 1.9582443237304688], dtype=torch.float64)
    g = torch.tensor([-0.026848435401916504, -192.978515625], dtype=torch.float64)
    leaf = x.abs().requires_grad_()
    (grad,) = torch.autograd.grad(lookup("nn.rms_norm").magnitude(leaf, (2,)), leaf, g.abs())
    allowed = bound(torch.float32, 2 + 2, 3, grad)  # terms: the output's and the input's elements
    assert abs(-0.0576171875 - -0.0576324462890625) <= allowed[1]
    assert allowed[1] < 0.01  # still far tighter than the gradient itself
