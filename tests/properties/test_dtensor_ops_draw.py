"""The family's draw: each operator group gets its share of the examples, whatever its number of operators."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzdist.properties import dtensor_ops
from fuzzdist.properties.dtensor_ops.catalogue import GROUPS, all_ops


def test_every_group_gets_a_share_of_the_examples():
    seen: Counter[str] = Counter()
    examples = 400

    @settings(
        max_examples=examples, database=None, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(data=st.data())
    def draw(data):
        case = data.draw(dtensor_ops.op_cases(2))
        seen[all_ops()[case.op].group] += 1

    draw()  # derandomized: 400 examples' shares vary run to run, and the smallest fell under the bound 1 in 3
    assert set(seen) == set(GROUPS)
    # drawn by name, the pointwise overloads called through their schemas (most of the catalogue) took
    # four examples in five; by group, each group's expected share is 1 / len(GROUPS)
    assert seen["schema_ops"] < 2 * examples / len(GROUPS)
    assert min(seen.values()) > examples / len(GROUPS) / 3
