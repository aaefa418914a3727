"""What the DTensor-operator family's ranks pay per example: they look up only their case's operator, and
keep their processes when DTensor raised before any collective."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from helpers import planted_dtensor_ops as planted

from fuzzdist.errors import PropertyFailure
from fuzzdist.properties import dtensor_ops
from fuzzdist.properties.dtensor_ops import schema_ops
from fuzzdist.properties.dtensor_ops.catalogue import lookup
from fuzzdist.properties.dtensor_ops.operands import Operand
from fuzzdist.strategies import TensorSpec

_LOOKUP_ALONE = """
import sys
from fuzzdist.properties.dtensor_ops.catalogue import OPS, lookup
from fuzzdist.properties.dtensor_ops import schema_ops
assert lookup("matrix.mm") is not None and lookup("schema.aten.abs.out") is not None
print(" ".join(sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("fuzzdist.properties.dtensor_ops."))))
print(schema_ops.plans.cache_info().currsize, len(OPS))
"""


def test_a_rank_looks_up_its_operator_without_building_the_catalogue():
    # in a fresh interpreter, as on a rank just started: the matrix group alone is imported, and the
    # schema operator is built without asking torch which dtypes ~500 overloads take
    out = subprocess.run(
        [sys.executable, "-c", _LOOKUP_ALONE], capture_output=True, text=True, timeout=300, check=True
    ).stdout.splitlines()
    modules = out[0].split()
    assert "matrix" in modules and not {"pointwise", "reductions", "views", "indexing", "nn", "joins"} & set(modules)
    probed, registered = out[1].split()
    assert probed == "0"
    assert int(registered) < 100  # the matrix group's operators, not the whole catalogue


def test_a_ranks_schema_operator_is_the_drivers():
    registered = {name: op for name, op in dtensor_ops.all_ops().items() if op.group == "schema_ops"}
    assert len(registered) > 300
    for name, op in registered.items():
        built = schema_ops.one(name)
        assert built is not None, name
        assert (built.name, built.group, built.mutates, built.local_domain) == (
            op.name,
            op.group,
            op.mutates,
            op.local_domain,
        ), name
    assert lookup("schema.aten.no_such_overload") is None
    assert lookup("no_such_group.mm") is None


_CASE = dtensor_ops.OpCase("pointwise.neg", (Operand(TensorSpec((2,), torch.float32), 0, ("S0",), (0,)),), (), (2,))


@pytest.mark.fuzzdist(world_size=2)
def test_a_rank_that_raised_before_any_collective_keeps_its_process(rank_pool):
    before = rank_pool.pids
    with pytest.raises(PropertyFailure, match="raised before any collective"):
        dtensor_ops.check(rank_pool, _CASE, rules=planted.raises_before_any_collective)
    assert rank_pool.pids == before


@pytest.mark.fuzzdist(world_size=2)
def test_a_rank_that_raised_after_a_collective_is_replaced(rank_pool):
    before = rank_pool.pids
    with pytest.raises(PropertyFailure, match="raised after a collective"):
        dtensor_ops.check(rank_pool, _CASE, rules=planted.raises_after_a_collective)
    assert not set(rank_pool.pids) & set(before)
