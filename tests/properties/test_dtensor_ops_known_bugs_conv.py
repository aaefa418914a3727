"""The DTensor-operator family's predicate for convolutions whose output takes the input's placements: it
matches the case's operands' placements and the ranks' problems, never words."""

from __future__ import annotations

import torch

from fuzzdist.errors import PropertyFailure
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import dtensor_ops
from fuzzdist.properties.dtensor_ops import known_bugs as bugs
from fuzzdist.properties.dtensor_ops.operands import Operand
from fuzzdist.strategies import TensorSpec


def _operand(shape: tuple[int, ...], placement: str) -> Operand:
    return Operand(TensorSpec(shape, torch.float32), 0, (placement,), (0,))


def _conv(x: str, w: str, bias: str | None = None, op: str = "conv.conv1d") -> dtensor_ops.OpCase:
    b = None if bias is None else _operand((2,), bias)
    args = (_operand((1, 1, 3), x), _operand((2, 1, 2), w), b)
    return dtensor_ops.OpCase(op, args, (("dilation", 1), ("groups", 1), ("padding", 0), ("stride", 1)), (2,))


_WRONG = PropertyFailure("words nobody reads", [[Problem(Kind.MISMATCH, "output 0", got=1, expected=0)]] * 2)


def test_a_convolution_with_a_placed_weight_bias_or_input_dim_is_recognised():
    assert bugs._is_convolution_keeping_input_placements({"case": _conv("R", "P+")}, _WRONG)
    assert bugs._is_convolution_keeping_input_placements({"case": _conv("R", "S0")}, _WRONG)
    assert bugs._is_convolution_keeping_input_placements({"case": _conv("R", "R", bias="S0")}, _WRONG)
    assert bugs._is_convolution_keeping_input_placements({"case": _conv("S1", "R")}, _WRONG)
    assert bugs._is_convolution_keeping_input_placements({"case": _conv("P>", "R")}, _WRONG)
    # a Partial(sum) input is right without a bias (convolution is linear in it); the bias would be added
    # on every rank
    assert bugs._is_convolution_keeping_input_placements({"case": _conv("P+", "R", bias="R")}, _WRONG)
    assert bugs._is_convolution_keeping_input_placements({"case": _conv("R", "P+", op="conv.conv2d")}, _WRONG)


def test_placements_the_rule_gets_right_are_not_recognised():
    for x in ("R", "S0"):
        assert not bugs._is_convolution_keeping_input_placements({"case": _conv(x, "R", bias="R")}, _WRONG)
    assert not bugs._is_convolution_keeping_input_placements({"case": _conv("P+", "R")}, _WRONG)
    # another operator, and a convolution whose ranks reported nothing
    pad = dtensor_ops.OpCase("conv.pad", (_operand((3,), "P+"), [0, 1]), (), (2,))
    assert not bugs._is_convolution_keeping_input_placements({"case": pad}, _WRONG)
    nothing = PropertyFailure("words nobody reads", [None, None])
    assert not bugs._is_convolution_keeping_input_placements({"case": _conv("R", "P+")}, nothing)
