"""The DTensor-operator family's registered-overload report and its argument checks."""

from __future__ import annotations

import pytest

from fuzzdist.errors import InvalidArgument
from fuzzdist.properties import dtensor_ops
from fuzzdist.properties.dtensor_ops.operands import Operand, partial_pieces
from fuzzdist.properties.dtensor_ops.overloads import report
from fuzzdist.strategies import TensorSpec


def test_every_registered_overload_is_drawn_or_excluded_with_a_reason():
    result = report(examples=1)
    counts = result.counts()
    assert result.drawn | set(result.excluded) == result.registered
    assert not result.drawn & set(result.excluded)
    assert counts["registered"] == len(result.registered)
    assert counts["drawn"] + sum(n for what, n in counts.items() if what.startswith("excluded")) == counts["registered"]
    assert counts["drawn"] >= 400
    assert all(reason for reason in result.excluded.values())


class _Pool:
    world_size = 2


_CASE = dtensor_ops.OpCase(
    "pointwise.neg", (Operand(TensorSpec((1,), __import__("torch").float32), 0, ("R",), (0,)),), (), (2,)
)


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("not a case", "must be an OpCase"),
        (dtensor_ops.OpCase("no.such_op", (), (), (2,)), "unknown operator"),
        (dtensor_ops.OpCase("pointwise.neg", _CASE.args, (), (4,)), "has 4 ranks but the pool has 2"),
    ],
)
def test_bad_arguments_say_what_to_do(case, words):
    with pytest.raises(InvalidArgument, match=words):
        dtensor_ops.check(_Pool(), case)


def test_bad_rules_say_what_to_do():
    with pytest.raises(InvalidArgument, match="context-manager factory"):
        dtensor_ops.check(_Pool(), _CASE, rules=3)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16", "int64"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_partial_sum_pieces_add_up_exactly_in_any_order(dtype, n):
    import itertools

    import torch

    full = TensorSpec((64,), getattr(torch, dtype), pattern="random").materialize("cpu", 7)
    pieces = partial_pieces(full, "sum", n, 1, 3)
    for order in itertools.permutations(pieces):
        total = order[0].clone()
        for piece in order[1:]:
            total = total + piece
        assert torch.equal(total, full)
