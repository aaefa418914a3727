"""The DTensor-operator family's predicate for nearest interpolation of an empty DTensor raising from the meta
function's guard: it matches the case's operator, mode and operand shape and the ranks' problems' fields, and
torch's own words only through ``evidence.says``."""

from __future__ import annotations

import torch

from fuzzdist.errors import PropertyFailure
from fuzzdist.known_bugs import recognise
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import dtensor_ops
from fuzzdist.properties.dtensor_ops import known_bugs as bugs
from fuzzdist.properties.dtensor_ops.operands import Operand
from fuzzdist.properties.dtensor_ops.ranks import DTENSOR_CALL
from fuzzdist.strategies import TensorSpec

_GUARD = "cond must be a bool, but got <class 'int'>"  # torch 2.13.0's words, out of torch._check


def _interpolate(shape: tuple[int, ...], mode: str = "nearest") -> dtensor_ops.OpCase:
    x = Operand(TensorSpec(shape, torch.float32), 0, ("R",), (0,))
    kwargs = (("mode", mode), ("scale_factor", 2.0)) + ((("align_corners", False),) if mode != "nearest" else ())
    return dtensor_ops.OpCase("conv.interpolate", (x,), kwargs, (2,))


def _raised(words: str, error: type[BaseException] = RuntimeError) -> PropertyFailure:
    problem = Problem.raised(error(words), DTENSOR_CALL)
    return PropertyFailure("words nobody reads", [[problem], [problem]])


def test_nearest_interpolation_of_an_empty_operand_raising_the_guard_is_recognised():
    # the campaign's shrunk example: a (0, 1, 1) Replicate operand, nearest, scale 2, on 2 ranks
    assert bugs._is_nearest_interpolate_of_empty_raising({"case": _interpolate((0, 1, 1))}, _raised(_GUARD))
    assert bugs._is_nearest_interpolate_of_empty_raising({"case": _interpolate((0, 2, 3, 3))}, _raised(_GUARD))
    found = recognise("dtensor_ops", {"case": _interpolate((0, 1, 1))}, _raised(_GUARD))
    assert found is not None and found.id == "dtensor-interpolate-nearest-empty-raises"


def test_near_misses_are_not_recognised():
    case = {"case": _interpolate((0, 1, 1))}
    # a non-empty operand, another mode, another operator
    assert not bugs._is_nearest_interpolate_of_empty_raising({"case": _interpolate((1, 1, 1))}, _raised(_GUARD))
    linear = {"case": _interpolate((0, 1, 1), mode="linear")}
    assert not bugs._is_nearest_interpolate_of_empty_raising(linear, _raised(_GUARD))
    empty = Operand(TensorSpec((0, 1, 1), torch.float32), 0, ("R",), (0,))
    pad = dtensor_ops.OpCase("conv.pad", (empty, [0, 1]), (), (2,))
    assert not bugs._is_nearest_interpolate_of_empty_raising({"case": pad}, _raised(_GUARD))
    # another error, another type, a wrong value, or no problem at all
    assert not bugs._is_nearest_interpolate_of_empty_raising(case, _raised("Non-empty 3D data tensor expected"))
    assert not bugs._is_nearest_interpolate_of_empty_raising(case, _raised(_GUARD, AssertionError))
    wrong = PropertyFailure("words nobody reads", [[Problem(Kind.MISMATCH, "output 0", got=1, expected=0)]] * 2)
    assert not bugs._is_nearest_interpolate_of_empty_raising(case, wrong)
    assert not bugs._is_nearest_interpolate_of_empty_raising(case, PropertyFailure("words nobody reads", [None, None]))
