"""The DTensor-operator family's known-bug predicates match Problem fields and the case's operands: a
failure with the fields is recognised whatever its words say, one without them is not."""

from __future__ import annotations

import torch

from fuzzdist.errors import PropertyFailure, RankTimeout
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import dtensor_ops
from fuzzdist.properties.dtensor_ops import known_bugs as bugs
from fuzzdist.properties.dtensor_ops.operands import Operand
from fuzzdist.properties.dtensor_ops.ranks import DTENSOR_CALL, OUTPUT
from fuzzdist.strategies import TensorSpec


def _operand(dtype: torch.dtype, *placements: str, shape: tuple[int, ...] = (2,)) -> Operand:
    return Operand(TensorSpec(shape, dtype), 0, placements, (0,) * len(placements))


def _case(op: str, *operands: Operand, mesh: tuple[int, ...] = (2,)) -> dtensor_ops.OpCase:
    return dtensor_ops.OpCase(op, operands, (), mesh)


def _failure(*problems: Problem) -> PropertyFailure:
    return PropertyFailure("words nobody reads", [list(problems), list(problems)])


_FLOAT_OUTPUT = Problem(
    Kind.SHAPE, "reworded", got=((2,), torch.float32), expected=((2,), torch.int64), subject=(OUTPUT, 0)
)


def test_an_integer_partial_sum_made_float_is_recognised_by_its_output_subject():
    case = _case("pointwise.add_ints", _operand(torch.int64, "P+"), _operand(torch.int64, "R"))
    assert bugs._is_integer_partial_sum_made_float({"case": case}, _failure(_FLOAT_OUTPUT))
    not_an_output = Problem(Kind.SHAPE, "output 0", got=_FLOAT_OUTPUT.got, expected=_FLOAT_OUTPUT.expected)
    assert not bugs._is_integer_partial_sum_made_float({"case": case}, _failure(not_an_output))
    max_partial = _case("pointwise.add_ints", _operand(torch.int64, "P>"), _operand(torch.int64, "R"))
    assert not bugs._is_integer_partial_sum_made_float({"case": max_partial}, _failure(_FLOAT_OUTPUT))


def test_mixed_partial_reduce_ops_asserting_are_recognised_by_reduce_op():
    raised = Problem(Kind.RAISED, DTENSOR_CALL, error="AssertionError")
    mixed = _case("pointwise.add", _operand(torch.float32, "P+"), _operand(torch.float32, "P<"))
    same = _case("pointwise.add", _operand(torch.float32, "P+"), _operand(torch.float32, "P+"))
    assert bugs._is_partial_type_change_assert({"case": mixed}, _failure(raised))
    assert not bugs._is_partial_type_change_assert({"case": same}, _failure(raised))


def test_the_empty_min_is_recognised_on_operators_that_write_out_whatever_their_name():
    raised = Problem(Kind.RAISED, DTENSOR_CALL, error="RuntimeError", error_text="min() arg is an empty sequence")
    out = _case("pointwise.add_out", _operand(torch.float32, "S0"))
    in_place = _case("schema.aten.abs_.default", _operand(torch.float32, "S0"))
    assert dtensor_ops.all_ops()["pointwise.add_out"].out
    assert bugs._is_out_placement_empty_min({"case": out}, _failure(raised))
    assert not bugs._is_out_placement_empty_min({"case": in_place}, _failure(raised))


def test_an_empty_shard_is_found_from_the_shard_dim():
    assert bugs._has_empty_shard(_case("reductions.argmax", _operand(torch.float32, "S1", shape=(3, 1))))
    assert not bugs._has_empty_shard(_case("reductions.argmax", _operand(torch.float32, "S0", shape=(3, 1))))
    assert not bugs._has_empty_shard(_case("reductions.argmax", _operand(torch.float32, "R", shape=(3, 1))))


def _view(shape: tuple[int, ...], target: tuple[int, ...], op: str = "views.view") -> dtensor_ops.OpCase:
    return dtensor_ops.OpCase(op, (_operand(torch.float32, "R", "R", shape=shape), target), (), (1, 2))


_VIEW_HANG = RankTimeout([0, 1], 30.0, {0: "", 1: ""})


def test_a_view_of_an_empty_tensor_as_1d_that_hung_is_recognised():
    assert bugs._is_view_empty_to_1d_hang({"case": _view((7, 0, 7), (0,))}, _VIEW_HANG)
    assert bugs._is_view_empty_to_1d_hang({"case": _view((0, 3), (0,), "views.reshape")}, _VIEW_HANG)
    flatten = dtensor_ops.OpCase("views.flatten", (_operand(torch.float32, "R", shape=(0, 3)), -1, 0), (), (2,))
    assert bugs._is_view_empty_to_1d_hang({"case": flatten}, _VIEW_HANG)


def test_near_misses_of_the_empty_view_hang_are_not_recognised():
    # a 2-D target, no size-0 dim, an operator that does not reshape, a failure that is not a hang
    assert not bugs._is_view_empty_to_1d_hang({"case": _view((7, 0, 7), (0, 7))}, _VIEW_HANG)
    assert not bugs._is_view_empty_to_1d_hang({"case": _view((7, 1, 7), (49,))}, _VIEW_HANG)
    assert not bugs._is_view_empty_to_1d_hang({"case": _view((7, 0, 7), (0,), "views.expand")}, _VIEW_HANG)
    raised = Problem(Kind.RAISED, DTENSOR_CALL, error="RuntimeError")
    assert not bugs._is_view_empty_to_1d_hang({"case": _view((7, 0, 7), (0,))}, _failure(raised))
    partial = dtensor_ops.OpCase("views.flatten", (_operand(torch.float32, "R", shape=(0, 3, 2)), 1, 2), (), (2,))
    assert not bugs._is_view_empty_to_1d_hang({"case": partial}, _VIEW_HANG)


def test_the_view_rule_replay_matches_how_torch_ends_each_grouping():
    # derived by hand from view_groups' steps, and each checked against torch 2.13's own view_groups
    assert bugs._view_groups_outcome((0,), (0, 3)) == "loops"  # the target's 3 is left once (0,) is used up
    assert bugs._view_groups_outcome((0, 1, 0, 0), (0, 0)) == "loops"
    assert bugs._view_groups_outcome((0, 1), (3, 0, 2)) == "raises"  # a modulo by the input's 0
    assert bugs._view_groups_outcome((7, 0, 7), (0, 7)) == "returns"
    assert bugs._view_groups_outcome((3, 0), (0,)) == "returns"


def _matmul(first: tuple[int, ...], second: tuple[int, ...]) -> dtensor_ops.OpCase:
    operands = (_operand(torch.bfloat16, "S3", "S3", shape=first), _operand(torch.bfloat16, "R", "P<", shape=second))
    return dtensor_ops.OpCase("matrix.matmul", operands, (), (4, 1))


def test_a_matmul_whose_fold_or_unfold_loops_in_the_view_rule_is_recognised():
    assert bugs._is_view_empty_to_1d_hang({"case": _matmul((0, 1, 0, 0), (0,))}, _VIEW_HANG)  # its fold
    assert bugs._is_view_empty_to_1d_hang({"case": _matmul((0, 3, 2), (2,))}, _VIEW_HANG)  # its unfold (0,) to (0, 3)
    flatten = dtensor_ops.OpCase("views.flatten", (_operand(torch.float32, "S0", shape=(1, 0, 2)), 0, 2), (), (4,))
    assert bugs._is_view_empty_to_1d_hang({"case": flatten}, _VIEW_HANG)


def test_matmuls_whose_reshapes_end_are_not_recognised_as_the_view_hang():
    assert not bugs._is_view_empty_to_1d_hang({"case": _matmul((2, 1, 3, 0), (0,))}, _VIEW_HANG)
    assert not bugs._is_view_empty_to_1d_hang({"case": _matmul((1, 0, 2), (2, 3))}, _VIEW_HANG)
    assert not bugs._is_view_empty_to_1d_hang({"case": _matmul((0, 3), (3,))}, _VIEW_HANG)  # 2-D: no fold


def _norm_inf(placement: str, shape: tuple[int, ...] = (1,), op: str = "reductions.norm_inf") -> dtensor_ops.OpCase:
    return dtensor_ops.OpCase(op, (_operand(torch.float32, placement, shape=shape),), (), (3,))


def test_an_inf_norm_with_an_empty_shard_that_hung_is_recognised():
    # the campaign's shrunk example: (1,) as Shard(0) on 3 ranks, ranks 1 and 2 hold nothing
    assert bugs._is_norm_inf_empty_shard_hang({"case": _norm_inf("S0")}, _VIEW_HANG)


def test_near_misses_of_the_inf_norm_hang_are_not_recognised():
    # no empty shard, another reduction, a failure that is not a hang
    assert not bugs._is_norm_inf_empty_shard_hang({"case": _norm_inf("S0", shape=(3,))}, _VIEW_HANG)
    assert not bugs._is_norm_inf_empty_shard_hang({"case": _norm_inf("R")}, _VIEW_HANG)
    assert not bugs._is_norm_inf_empty_shard_hang({"case": _norm_inf("S0", op="reductions.norm_1")}, _VIEW_HANG)
    raised = Problem(Kind.RAISED, DTENSOR_CALL, error="RuntimeError")
    assert not bugs._is_norm_inf_empty_shard_hang({"case": _norm_inf("S0")}, _failure(raised))


def _linear(input_shape: tuple[int, ...], op: str = "matrix.linear") -> dtensor_ops.OpCase:
    weight = _operand(torch.float32, "R", shape=(0, input_shape[-1]))
    return dtensor_ops.OpCase(op, (_operand(torch.float32, "R", shape=input_shape), weight), (), (2,))


def _shape(got: tuple[int, ...], expected: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Problem:
    return Problem(Kind.SHAPE, "reworded", got=(got, torch.float32), expected=(expected, dtype))


def test_a_linear_of_a_1d_input_with_a_leading_1_is_recognised():
    # the campaign's shrunk example: a (0,) input and a (0, 0) weight gave (1, 0) for (0,)
    assert bugs._is_linear_1d_input_shape({"case": _linear((0,))}, _failure(_shape((1, 0), (0,))))


def test_near_misses_of_the_linear_1d_shape_are_not_recognised():
    # a 2-D input, another operator, another shape, another dtype, a value mismatch
    assert not bugs._is_linear_1d_input_shape({"case": _linear((2, 0))}, _failure(_shape((1, 2, 0), (2, 0))))
    assert not bugs._is_linear_1d_input_shape({"case": _linear((0,), "matrix.matmul")}, _failure(_shape((1, 0), (0,))))
    assert not bugs._is_linear_1d_input_shape({"case": _linear((0,))}, _failure(_shape((0, 1), (0,))))
    assert not bugs._is_linear_1d_input_shape({"case": _linear((0,))}, _failure(_shape((1, 0), (0,), torch.float64)))
    mismatch = Problem(Kind.MISMATCH, "output 0", got=1.0, expected=2.0)
    assert not bugs._is_linear_1d_input_shape({"case": _linear((0,))}, _failure(mismatch))
