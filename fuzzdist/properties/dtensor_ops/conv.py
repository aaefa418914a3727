"""Convolution, pooling, batch and group norm, resampling and padding: ``conv1d``/``conv2d`` (stride,
padding, dilation, groups, bias), ``avg_pool``/``max_pool`` (1-D and 2-D, with indices), adaptive pools,
``batch_norm`` (evaluation with running statistics; training without them), ``group_norm``,
``interpolate`` (nearest, linear, bilinear, bicubic) and ``pad`` (constant).

Convolutions, averages and normalisations are ``reordered`` (``terms``: the products or elements each
output sums; ``magnitude``: the operator over absolute values where that bounds the sum of absolute
terms); max pooling, nearest resampling and padding move data: bitwise.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import Arguments, op_maker, register
from fuzzdist.properties.dtensor_ops.inputs import POSITIVE_SIZES, SIZES, operand

_FLOATS = (torch.float32, torch.float64)  # CPU convolutions of half types are slow and coarse


_op = op_maker("conv", grad=True)


def _image(d: st.DrawFn, spatial: int, min_size: int = 1) -> tuple[int, ...]:
    """(batch, channels, *spatial sizes): batch may be empty, channels and spatial sizes not."""
    return (
        d(SIZES, label="batch"),
        d(POSITIVE_SIZES, label="channels"),
        *(d(st.integers(min_size, 7), label="size") for _ in range(spatial)),
    )


@st.composite
def _conv(d: st.DrawFn, spatial: int) -> Arguments:
    groups = d(st.sampled_from([1, 2]), label="groups")
    n = d(SIZES, label="batch")
    cin, cout = (groups * d(st.integers(1, 3), label=x) for x in ("in per group", "out per group"))
    kernel = tuple(d(st.integers(1, 3), label="kernel") for _ in range(spatial))
    stride, padding, dilation = (d(st.integers(lo, 2), label=x) for lo, x in ((1, "stride"), (0, "pad"), (1, "dil")))
    size = tuple(d(st.integers(dilation * (k - 1) + 1, 7), label="size") for k in kernel)
    dtype = d(st.sampled_from(_FLOATS), label="dtype")
    x = d(operand((n, cin, *size), (dtype,), ("random",)))
    w = d(operand((cout, cin // groups, *kernel), (dtype,), ("random",)))
    bias = d(st.one_of(st.none(), operand((cout,), (dtype,), ("random",))), label="bias")
    return (x, w, bias), {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}


def _conv_terms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return math.prod(args[1].spec.shape[1:]) + 1


@st.composite
def _pooled(d: st.DrawFn, spatial: int) -> Arguments:
    kernel = d(st.integers(1, 3), label="kernel")
    shape = _image(d, spatial, min_size=kernel)
    x = d(operand(shape, _FLOATS, ("random", "constant")))
    return (x, kernel), {"stride": d(st.integers(1, 3), label="stride")}


@st.composite
def _adaptive(d: st.DrawFn, spatial: int) -> Arguments:
    shape = _image(d, spatial)
    x = d(operand(shape, _FLOATS, ("random", "constant")))
    out = tuple(d(st.integers(1, 4), label="output size") for _ in range(spatial))
    return (x, out), {}


@st.composite
def _batch_norm(d: st.DrawFn) -> Arguments:
    # "Expected more than 1 value per channel when training": a size of at least 2 gives each channel two
    shape = (d(POSITIVE_SIZES, label="batch"), d(POSITIVE_SIZES, label="channels"), d(st.integers(2, 7), label="size"))
    dtype = d(st.sampled_from(_FLOATS), label="dtype")
    x = d(operand(shape, (dtype,), ("random", "constant")))
    weight, bias = (d(operand((shape[1],), (dtype,), ("random",))) for _ in range(2))
    if d(st.booleans(), label="training"):
        return (x, None, None, weight, bias), {"training": True}
    mean = d(operand((shape[1],), (dtype,), ("random",)))
    var = d(operand((shape[1],), (dtype,), ("random",)))
    return (x, mean, var, weight, bias), {"training": False}


def _batch_norm_call(x: Any, mean: Any, var: Any, weight: Any, bias: Any, training: bool) -> Any:
    if var is not None:
        var = var.abs() + 1  # a variance is non-negative
    return F.batch_norm(x, mean, var, weight, bias, training=training)


@st.composite
def _group_norm(d: st.DrawFn) -> Arguments:
    groups = d(st.integers(1, 3), label="groups")
    shape = (d(POSITIVE_SIZES, label="batch"), groups * d(st.integers(1, 2), label="per group"), d(st.integers(2, 7)))
    dtype = d(st.sampled_from(_FLOATS), label="dtype")
    x = d(operand(shape, (dtype,), ("random", "constant")))
    weight, bias = (d(operand((shape[1],), (dtype,), ("random",))) for _ in range(2))
    return (x, groups, weight, bias), {}


def _norm_terms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return 4 * math.prod(args[0].spec.shape)


def _norm_magnitude(x: Any, *rest: Any, **kwargs: Any) -> Any:
    """A normalised value is at most sqrt(n) for n normalised elements, times the weight, plus the bias."""
    weight, bias = [r for r in rest if isinstance(r, torch.Tensor)][-2:]
    scale = torch.full_like(x, x.numel() ** 0.5) * weight.reshape(1, -1, *[1] * (x.dim() - 2))
    return scale + bias.reshape(1, -1, *[1] * (x.dim() - 2))


_MODES = {1: ("nearest", "linear"), 2: ("nearest", "bilinear", "bicubic")}


@st.composite
def _interpolated(d: st.DrawFn) -> Arguments:
    spatial = d(st.sampled_from([1, 2]), label="spatial dims")
    mode = d(st.sampled_from(_MODES[spatial]), label="mode")
    x = d(operand(_image(d, spatial), _FLOATS, ("random", "constant")))
    kwargs: dict[str, Any] = {"mode": mode, "scale_factor": d(st.sampled_from([2.0, 1.5, 3.0]), label="scale")}
    if mode != "nearest":
        kwargs["align_corners"] = d(st.booleans(), label="align_corners")
    return (x,), kwargs


def _interpolate_terms(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return 16


@st.composite
def _padded(d: st.DrawFn) -> Arguments:
    ndim = d(st.integers(1, 3), label="dims")
    x = d(operand(tuple(d(SIZES, label="size") for _ in range(ndim)), _FLOATS))
    pads = [d(st.integers(0, 2), label="pad") for _ in range(2 * d(st.integers(1, ndim), label="padded dims"))]
    return (x, pads), {"value": d(st.sampled_from([0.0, -1.5]), label="value")}


register(
    _op("conv1d", F.conv1d, lambda: _conv(1), reordered=True, terms=_conv_terms),
    _op("conv2d", F.conv2d, lambda: _conv(2), reordered=True, terms=_conv_terms),
    _op("avg_pool1d", F.avg_pool1d, lambda: _pooled(1), reordered=True, terms=lambda a, k: a[1] + 1),
    _op("avg_pool2d", F.avg_pool2d, lambda: _pooled(2), reordered=True, terms=lambda a, k: a[1] ** 2 + 1),
    _op("max_pool1d", F.max_pool1d, lambda: _pooled(1)),
    _op("max_pool2d_with_indices", partial(F.max_pool2d, return_indices=True), lambda: _pooled(2)),
    # an adaptive average sums at most ceil(size / output size) + 1 elements per dim
    _op("adaptive_avg_pool1d", F.adaptive_avg_pool1d, lambda: _adaptive(1), reordered=True, terms=lambda a, k: 8),
    _op("adaptive_avg_pool2d", F.adaptive_avg_pool2d, lambda: _adaptive(2), reordered=True, terms=lambda a, k: 64),
    _op("adaptive_max_pool2d", F.adaptive_max_pool2d, lambda: _adaptive(2)),
    *(
        _op(name, call, arguments, reordered=True, terms=_norm_terms, magnitude=_norm_magnitude)
        for name, call, arguments in (
            ("batch_norm", _batch_norm_call, lambda: _batch_norm()),
            ("group_norm", F.group_norm, lambda: _group_norm()),
        )
    ),
    _op("interpolate", F.interpolate, lambda: _interpolated(), reordered=True, terms=_interpolate_terms),
    _op("pad", F.pad, lambda: _padded()),
)
