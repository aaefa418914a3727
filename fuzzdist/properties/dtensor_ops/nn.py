"""nn operators: softmax, log_softmax, layer_norm, rms_norm, gelu (exact and tanh), silu, cross_entropy and
nll_loss (each reduction), and ``scaled_dot_product_attention`` on CPU.

Normalisations reduce along a dim: DTensor either gathers that dim first (then bitwise) or reduces it in
pieces; ``terms`` is that dim's size and ``magnitude`` a bound on the sum of the absolute terms each
output is computed from (for softmax the exponentials are at most 1 after the max is subtracted, so the
output itself; for a normalisation, the normalised values' absolute sum, scaled by the weight).

``scaled_dot_product_attention`` with a sharded operand is slow the first time a shape and placement is
seen (DTensor's sharding propagation traces its decomposition for 125 candidate placements, each tracing
the inner math attention's 125: tens of CPU-seconds per rank); the property's example timeout fits it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import POSITIVE_SIZES, SIZES, index_operand, operand, shapes

_FLOATS = (torch.float32, torch.float64)


_op = op_maker("nn", grad=True)


@st.composite
def _along(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1), label="shape")
    return (d(operand(shape, _FLOATS, ("random", "constant"))),), {"dim": d(st.integers(-len(shape), len(shape) - 1))}


@st.composite
def _normalized(d: st.DrawFn) -> Arguments:
    shape = d(shapes(min_dims=1, sizes=POSITIVE_SIZES), label="shape")
    k = d(st.integers(1, len(shape)), label="normalized dims")
    x = d(operand(shape, _FLOATS, ("random", "constant")))
    weight = d(st.one_of(st.none(), operand(shape[-k:], (x.spec.dtype,), ("random",))), label="weight")
    return (x, shape[-k:], weight), {}


@st.composite
def _layer_norm_args(d: st.DrawFn) -> Arguments:
    (x, normalized, weight), _ = d(_normalized())
    bias = d(operand(normalized, (x.spec.dtype,), ("random",))) if weight is not None and d(st.booleans()) else None
    return (x, normalized, weight, bias), {}


@st.composite
def _activation(d: st.DrawFn) -> Arguments:
    return (d(operand(d(shapes(), label="shape"), _FLOATS)),), {}


@st.composite
def _loss(d: st.DrawFn) -> Arguments:
    n, c = d(SIZES, label="batch"), d(POSITIVE_SIZES, label="classes")
    logits = d(operand((n, c), _FLOATS, ("random",)))
    target = d(index_operand((n,), c))
    return (logits, target), {"reduction": d(st.sampled_from(["mean", "sum", "none"]), label="reduction")}


@st.composite
def _sdpa(d: st.DrawFn) -> Arguments:
    b, h, lq, lk, e = (d(POSITIVE_SIZES, label=x) for x in ("batch", "heads", "queries", "keys", "width"))
    dtype = d(st.sampled_from(_FLOATS), label="dtype")
    q, k, v = (d(operand(s, (dtype,), ("random",))) for s in ((b, h, lq, e), (b, h, lk, e), (b, h, lk, e)))
    return (q, k, v), {"is_causal": d(st.booleans(), label="is_causal")}


def _dim_terms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    shape = args[0].spec.shape
    return shape[kwargs["dim"]] if shape else 1


def _normalized_terms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    n = 1
    for s in args[1]:
        n *= s
    return 4 * n  # mean, variance (squares of the centred values), each a sum of n terms, then scaling


def _normalized_magnitude(centred: bool) -> Callable[..., Any]:
    """A normalisation's bound, as a value and as a derivative (``centred``: layer_norm, else rms_norm).

    Its value: each normalised value is at most sqrt(n) (n the normalised elements), times the weight; plus
    the bias.  Its derivative bounds the input gradient's terms.  With ``s`` the row's scale (the root mean
    square, or the standard deviation) and ``h = x / s`` (centred for layer_norm), the gradient is
    ``(w_i g_i - h_i mean_j(w_j g_j h_j)) / s`` for rms_norm and has ``- mean_j(w_j g_j)`` inside the
    bracket too for layer_norm; since ``|h_j| <= sqrt(n)``, its terms are at most
    ``(|w_i g_i| + c sum_j |w_j g_j|) / s`` with ``c`` 1 (rms_norm) or 2 (layer_norm).  That is what autograd
    gives for ``w (x_i + c sum_j x_j) / s`` under upstream ``|g|``, with ``s`` taken over the absolute
    values (the same root mean square; a standard deviation no larger) and the operator's default eps
    at float64 (no larger): both make ``1 / s`` an upper bound.  The part that carries it is zero in value
    (it minus itself detached)."""
    spread = 2 if centred else 1

    def magnitude(x: Any, normalized: Any, weight: Any = None, bias: Any = None, **kw: Any) -> Any:
        n = 1
        for s in normalized:
            n *= s
        dims = tuple(range(-len(normalized), 0))
        x_abs = x.detach()
        if centred:
            scale = (x_abs.var(dims, correction=0, keepdim=True) + 1e-5).sqrt()
        else:
            scale = (x_abs.square().mean(dims, keepdim=True) + torch.finfo(x.dtype).eps).sqrt()
        carrier = (x + spread * x.sum(dims, keepdim=True)) / scale
        if weight is not None:
            carrier = carrier * weight.detach()
        out = torch.full_like(x_abs, n**0.5)
        if weight is not None:
            out = out * weight
        out = out + (carrier - carrier.detach())
        return out if bias is None else out + bias

    return magnitude


def _normalisation(name: str, call: Callable[..., Any], arguments: Callable[[], st.SearchStrategy[Arguments]]) -> Any:
    """A normalisation over the last dims, bounded by :func:`_normalized_magnitude`."""
    magnitude = _normalized_magnitude(centred=name == "layer_norm")
    return _op(name, call, arguments, reordered=True, terms=_normalized_terms, magnitude=magnitude)


def _loss_terms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    n, c = args[0].spec.shape
    return 2 * c + n


def _loss_magnitude(call: Callable[..., Any]) -> Callable[..., Any]:
    """A loss over the absolute logits, reduced by sum: each term's log-sum-exp is at most max|x| + log c."""

    def magnitude(logits: Any, target: Any, reduction: str) -> Any:
        per = logits.amax(-1) + torch.log(torch.tensor(float(logits.shape[-1]))) + logits.abs().amax(-1) + 1
        return per.sum() if reduction == "sum" else per.mean() if reduction == "mean" else per

    return magnitude


def _sdpa_terms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return 4 * (args[1].spec.shape[2] + args[0].spec.shape[3])


def _sdpa_magnitude(q: Any, k: Any, v: Any, is_causal: bool) -> Any:
    """Each output is a convex combination of the values: at most max|v|, computed through q.k products
    whose rounding the softmax can amplify by up to max |q.k| (its exponent's scale)."""
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    vmax = v.amax(dim=(-2,), keepdim=True).expand(*q.shape[:-1], v.shape[-1])
    return vmax * (1 + scores.amax(-1, keepdim=True))


def _softmax_magnitude(x: Any, dim: int) -> Any:
    """Softmax's bound, as a value and as a derivative.  Its value, 1, bounds every output (the exponentials
    are at most 1 after the max is subtracted).  Its derivative bounds the gradient's terms: softmax's
    gradient is ``y_i (g_i - sum_j g_j y_j)`` along ``dim``, whose terms are at most ``|g_i| + sum_j |g_j|``
    since ``y <= 1``; that is what autograd gives for ``x_i + sum_j x_j`` under upstream ``|g|``.  The part
    that carries it is zero in value (it minus itself detached)."""
    carrier = x + x.sum(dim, keepdim=True)
    return 1 + carrier - carrier.detach()


register(
    _op(
        "softmax",
        F.softmax,
        lambda: _along(),
        reordered=True,
        terms=_dim_terms,
        magnitude=_softmax_magnitude,
    ),
    _op(
        "log_softmax",
        F.log_softmax,
        lambda: _along(),
        reordered=True,
        terms=_dim_terms,
        magnitude=lambda x, dim: x.amax(dim, keepdim=True).expand_as(x) * 2 + 1,
    ),
    _normalisation("layer_norm", F.layer_norm, lambda: _layer_norm_args()),
    _normalisation("rms_norm", F.rms_norm, lambda: _normalized()),
    _op("gelu", F.gelu, lambda: _activation()),
    _op("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), lambda: _activation()),
    _op("silu", F.silu, lambda: _activation()),
    _op(
        "cross_entropy",
        F.cross_entropy,
        lambda: _loss(),
        reordered=True,
        terms=_loss_terms,
        magnitude=_loss_magnitude(F.cross_entropy),
    ),
    _op(
        "nll_loss",
        lambda x, t, reduction: F.nll_loss(x, t, reduction=reduction),
        lambda: _loss(),
        reordered=True,
        terms=_loss_terms,
        magnitude=lambda x, t, reduction: F.nll_loss(x, t, reduction=reduction),
    ),
    _op(
        "scaled_dot_product_attention",
        F.scaled_dot_product_attention,
        lambda: _sdpa(),
        reordered=True,
        terms=_sdpa_terms,
        magnitude=_sdpa_magnitude,
        partial=False,
    ),
)
