"""The strategy functions' checks of their whole-number arguments: one message, before anything is drawn."""

from __future__ import annotations

import pytest

from fuzzdist.errors import InvalidStrategyArgument
from fuzzdist.properties.fsdp1.config import fsdp1_configs
from fuzzdist.properties.join import join_cases
from fuzzdist.strategies import check_ints, ddp_configs
from fuzzdist.strategies._arguments import check_int


@pytest.mark.parametrize("value", [0, True, 1.5, "2"])
def test_anything_but_an_int_at_least_the_minimum_is_refused_naming_both(value):
    with pytest.raises(InvalidStrategyArgument, match=rf"^max_width must be an int >= 1, got {value!r}$"):
        check_int("max_width", value, 1)


def test_the_first_argument_out_of_bounds_is_the_one_named():
    assert check_int("n", 3, 3) == 3
    with pytest.raises(InvalidStrategyArgument, match="^b must be"):
        check_ints(("a", 0, 0), ("b", -1, 0), ("c", -1, 0))


@pytest.mark.parametrize(
    ("strategy", "kwargs", "named"),
    [
        (fsdp1_configs, {"max_depth": True}, "max_depth"),
        (fsdp1_configs, {"world_size": 0}, "world_size"),
        (ddp_configs, {"max_steps": 0}, "max_steps"),
        (join_cases, {"max_batches": -1}, "max_batches"),
    ],
)
def test_the_strategies_refuse_bad_bounds_when_called(strategy, kwargs, named):
    with pytest.raises(InvalidStrategyArgument, match=f"^{named} must be an int >= "):
        strategy(**kwargs)
