"""The DTensor-operator family's predicates for torch.split along an empty dim and for fill_ on a
Partial(sum) divisor's gradient: they match Problem fields and the case's operands, never words."""

from __future__ import annotations

import torch

from fuzzdist.errors import PropertyFailure
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import dtensor_ops
from fuzzdist.properties.dtensor_ops import known_bugs as bugs
from fuzzdist.properties.dtensor_ops.operands import Operand
from fuzzdist.properties.dtensor_ops.ranks import DTENSOR_CALL
from fuzzdist.strategies import TensorSpec


def _operand(shape: tuple[int, ...], *placements: str) -> Operand:
    return Operand(TensorSpec(shape, torch.float32), 0, placements, (0,) * len(placements))


def _failure(*problems: Problem) -> PropertyFailure:
    return PropertyFailure("words nobody reads", [list(problems), list(problems)])


_RAISED = Problem(Kind.RAISED, DTENSOR_CALL, error="RuntimeError", error_text="reworded")


def _split(shape: tuple[int, ...], dim: int) -> dtensor_ops.OpCase:
    return dtensor_ops.OpCase("views.split", (_operand(shape, "R"), 1, dim), (), (2,))


def test_a_split_of_an_empty_operand_that_raises_is_recognised_by_its_shape():
    assert bugs._is_split_of_empty_dim_raising({"case": _split((0,), 0)}, _failure(_RAISED))
    assert bugs._is_split_of_empty_dim_raising({"case": _split((3, 0), 1)}, _failure(_RAISED))
    assert not bugs._is_split_of_empty_dim_raising({"case": _split((3, 1), 1)}, _failure(_RAISED))


def test_a_split_along_an_empty_dim_is_recognised_only_where_the_dtensor_call_raised():
    wrong_value = Problem(Kind.MISMATCH, "output 0", got=1, expected=0)
    backward = Problem(Kind.RAISED, "backward", error="RuntimeError")
    chunk = dtensor_ops.OpCase("views.chunk", (_operand((0,), "R"), 1, 0), (), (2,))
    assert not bugs._is_split_of_empty_dim_raising({"case": _split((0,), 0)}, _failure(wrong_value))
    assert not bugs._is_split_of_empty_dim_raising({"case": _split((0,), 0)}, _failure(backward))
    assert not bugs._is_split_of_empty_dim_raising({"case": chunk}, _failure(_RAISED))


def _addcdiv(divisor: str, mesh: tuple[int, ...] = (3,), grad_seed: int | None = 1) -> dtensor_ops.OpCase:
    placements = (divisor,) + ("R",) * (len(mesh) - 1)
    args = (_operand((2,), *("R",) * len(mesh)), _operand((2,), *("R",) * len(mesh)), _operand((2,), *placements))
    return dtensor_ops.OpCase("pointwise.addcdiv", args, (), mesh, grad_seed)


def _grad(got: float, expected: float) -> Problem:
    return Problem(Kind.MISMATCH, "reworded", got=got, expected=expected, count=1, size=2)


def test_an_addcdiv_gradient_scaled_by_the_divisors_partial_ranks_is_recognised():
    assert bugs._is_addcdiv_partial_divisor_grad_scaled({"case": _addcdiv("P+")}, _failure(_grad(-1.5, -0.5)))
    # Partial(sum) over the 2 ranks of one mesh dim of a (2, 2) mesh: twice, not four times
    two_d = _addcdiv("P+", mesh=(2, 2))
    assert bugs._is_addcdiv_partial_divisor_grad_scaled({"case": two_d}, _failure(_grad(-1.0, -0.5)))
    assert not bugs._is_addcdiv_partial_divisor_grad_scaled({"case": two_d}, _failure(_grad(-2.0, -0.5)))


def test_an_addcdiv_gradient_is_recognised_only_for_a_partial_sum_divisor_and_that_factor():
    scaled = _failure(_grad(-1.5, -0.5))
    assert not bugs._is_addcdiv_partial_divisor_grad_scaled({"case": _addcdiv("R")}, scaled)
    assert not bugs._is_addcdiv_partial_divisor_grad_scaled({"case": _addcdiv("P>")}, scaled)
    assert not bugs._is_addcdiv_partial_divisor_grad_scaled({"case": _addcdiv("P+", grad_seed=None)}, scaled)
    assert not bugs._is_addcdiv_partial_divisor_grad_scaled({"case": _addcdiv("P+")}, _failure(_grad(-0.7, -0.5)))
    assert not bugs._is_addcdiv_partial_divisor_grad_scaled({"case": _addcdiv("P+")}, _failure(_RAISED))
