"""The views group's generators draw arguments its local operators take: an argument an operator does
not take fails every example of it as "a bug in fuzzdist's generator"."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import all_ops
from fuzzdist.properties.dtensor_ops.operands import Operand

_VIEWS = sorted(name for name, op in all_ops().items() if op.group == "views")


def _full(value: Any) -> Any:
    """``value`` with every drawn operand replaced by its full tensor."""
    if isinstance(value, Operand):
        return value.full()
    if isinstance(value, (list, tuple)):
        return type(value)(_full(v) for v in value)
    return value


@pytest.mark.parametrize("name", _VIEWS)
def test_views_arguments_are_valid_for_the_local_operator(name):
    op = all_ops()[name]

    @settings(max_examples=25, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(drawn=op.arguments())
    def call(drawn):
        args, kwargs = drawn
        op.call(*_full(args), **_full(kwargs))

    call()


def test_squeeze_all_draws_tensors_with_size_one_dims():
    op = all_ops()["views.squeeze_all"]
    squeezed = []

    @settings(max_examples=50, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def draw(data):
        (x,), _ = data.draw(op.arguments())
        squeezed.append(1 in x.spec.shape)

    draw()
    assert any(squeezed)
