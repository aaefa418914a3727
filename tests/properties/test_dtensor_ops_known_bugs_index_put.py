"""The DTensor-operator family's predicate for index_put's backward raising on a plain zeros tensor: it
matches Problem fields and the case's operands, and torch's own words only through ``evidence.says``; the
example the property shrank to, run on ranks, is recognised."""

from __future__ import annotations

import pytest
import torch

from fuzzdist import known_bugs
from fuzzdist.errors import PropertyFailure
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import dtensor_ops
from fuzzdist.properties.dtensor_ops import known_bugs as bugs
from fuzzdist.properties.dtensor_ops.operands import Operand
from fuzzdist.properties.dtensor_ops.ranks import DTENSOR_CALL
from fuzzdist.strategies import TensorSpec

_MIXED = "aten.index_put.default got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor"


def _operand(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, requires_grad: bool = True) -> Operand:
    return Operand(TensorSpec(shape, dtype), 0, ("R",), (0,), requires_grad=requires_grad)


def _index_put(
    n: int, op: str = "index_put", x_grad: bool = True, grad_seed: int | None = 0, width: int = 0
) -> dtensor_ops.OpCase:
    """index_put of ``n`` values (rows of ``width`` where given) into an x of 3 (rows)."""
    rest = (width,) if width else ()
    args = (
        _operand((3, *rest), requires_grad=x_grad),
        _operand((n,), torch.int64, requires_grad=False),
        _operand((n, *rest)),
    )
    return dtensor_ops.OpCase(f"indexing.{op}", args, (("accumulate", op != "index_put"),), (4,), grad_seed)


def _failure(*problems: Problem) -> PropertyFailure:
    return PropertyFailure("words nobody reads", [list(problems), list(problems)])


def _backward_raised(text: str = _MIXED) -> Problem:
    return Problem(Kind.RAISED, "backward", error="RuntimeError", error_text=text)


def test_an_index_put_backward_raising_on_a_plain_tensor_is_recognised_for_other_than_one_value():
    raised = _failure(_backward_raised())
    assert bugs._is_index_put_backward_mixed_tensor({"case": _index_put(0)}, raised)
    assert bugs._is_index_put_backward_mixed_tensor({"case": _index_put(2)}, raised)
    assert bugs._is_index_put_backward_mixed_tensor({"case": _index_put(1, width=2)}, raised)
    # one value is one element: DTensor takes the plain zeros as Replicate and the backward works
    assert not bugs._is_index_put_backward_mixed_tensor({"case": _index_put(1)}, raised)


def test_an_index_put_backward_is_recognised_only_where_x_needs_its_gradient_without_accumulation():
    raised = _failure(_backward_raised())
    assert not bugs._is_index_put_backward_mixed_tensor({"case": _index_put(0, op="index_put_accumulate")}, raised)
    assert not bugs._is_index_put_backward_mixed_tensor({"case": _index_put(0, x_grad=False)}, raised)
    assert not bugs._is_index_put_backward_mixed_tensor({"case": _index_put(0, grad_seed=None)}, raised)


def test_an_index_put_is_recognised_only_for_the_backward_raising_torchs_mixed_tensor_error():
    case = {"case": _index_put(0)}
    forward = Problem(Kind.RAISED, DTENSOR_CALL, error="RuntimeError", error_text=_MIXED)
    wrong_grad = Problem(Kind.MISMATCH, "reworded", got=1.0, expected=0.0, count=1, size=3)
    assert not bugs._is_index_put_backward_mixed_tensor(case, _failure(forward))
    assert not bugs._is_index_put_backward_mixed_tensor(case, _failure(wrong_grad))
    assert not bugs._is_index_put_backward_mixed_tensor(case, _failure(_backward_raised("shape mismatch")))
    assert not bugs._is_index_put_backward_mixed_tensor(case, _failure(_backward_raised(), wrong_grad))


@pytest.mark.fuzzdist(world_size=4)
def test_the_shrunk_example_run_on_ranks_is_the_known_bug(rank_pool):
    # the property's shrunk example: no values put into a (1,) x, both x and values requiring grad
    index = Operand(TensorSpec((0,), torch.int64), 0, ("R",), (0,), index_high=1, unique_dim=0)
    args = (_operand((1,)), index, _operand((0,)))
    case = dtensor_ops.OpCase("indexing.index_put", args, (("accumulate", False),), (4,), 0)
    with known_bugs.not_collecting(), pytest.raises(PropertyFailure) as failed:  # raised, not tallied
        dtensor_ops.check(rank_pool, case)
    bug = known_bugs.recognise("dtensor_ops", {"case": case}, failed.value)
    assert bug is not None and bug.id == "dtensor-index-put-backward-mixed-tensor"
