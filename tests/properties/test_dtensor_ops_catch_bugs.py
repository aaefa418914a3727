"""The DTensor-operator property can fail: with a sharding rule planted wrong in one operator group,
fuzzdist catches it and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_dtensor_ops as planted
from helpers.minimal import minimal_failure

from fuzzdist.problems import Kind
from fuzzdist.properties import dtensor_ops

pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk(pool, rules, *ops):
    """The property over ``ops`` with ``rules`` entered on the ranks; the minimal failure."""
    f = minimal_failure(
        partial(dtensor_ops.check, pool, rules=rules), case=dtensor_ops.op_cases(pool.world_size, ops=ops)
    )
    return f.case, f.results


def _operands(case):
    return case.operands


def test_catches_a_product_of_partials_kept_partial(rank_pool):
    case, results = _shrunk(rank_pool, planted.mul_keeps_partial_product, "pointwise.mul")
    # both operands must be Partial(sum) for the planted rule to apply; the smallest is one float32 element
    # of each on the 1-D mesh (the sum of the pieces' products misses the cross terms)
    a, b = _operands(case)
    assert case.mesh_shape == (2,)
    assert a.placements == b.placements == ("P+",)
    assert a.spec.shape == b.spec.shape == (1,) and a.spec.dtype == b.spec.dtype == torch.float32
    for problems in results:
        assert problems[0].kind is Kind.MISMATCH and problems[0].what == "output 0: full_tensor()"


def test_catches_a_sum_over_a_sharded_dim_said_replicate(rank_pool):
    case, results = _shrunk(rank_pool, planted.sum_partial_as_replicate, "reductions.sum")
    # a sum over the sharded dim of the smallest tensor: (1,) as Shard(0) over 2 ranks, rank 1's piece
    # empty; each rank keeps its own partial sum as the "replicated" one, so rank 1 has 0
    (x,) = _operands(case)
    assert case.mesh_shape == (2,) and x.placements == ("S0",)
    assert x.spec.shape == (1,) and x.spec.dtype == torch.float32
    assert dict(case.kwargs)["dim"] == [0]
    assert results[0] is None
    assert results[1][0].kind is Kind.MISMATCH and results[1][0].got == 0


@pytest.mark.xfail(strict=True, reason="now shrinks to (1, 1), not the derived (1, 2): the minimum needs re-deriving")
def test_catches_an_mm_over_a_sharded_contraction_said_replicate(rank_pool):
    case, results = _shrunk(rank_pool, planted.mm_partial_as_replicate, "matrix.mm")
    # (1, 2) @ (2, 1) with the contraction dim sharded in either operand: the output is Partial, said
    # Replicate, so each rank's product of its own pieces is taken for the whole
    a, b = _operands(case)
    assert case.mesh_shape == (2,)
    assert a.spec.shape == (1, 2) and b.spec.shape == (2, 1)
    assert "S1" in a.placements or "S0" in b.placements
    assert any(p.what.startswith("output 0") for problems in results for p in problems)


def test_catches_a_transpose_keeping_its_shard_dim(rank_pool):
    case, results = _shrunk(rank_pool, planted.transpose_keeps_shard_dim, "views.transpose")
    # (1, 0) as Shard(0), its dims swapped: the output's Shard(0) names the wrong dim; rank 0 holds the
    # whole row, so it sees nothing, rank 1's empty (0, 0) piece gathers into the wrong shape
    (x,) = _operands(case)
    assert case.mesh_shape == (2,) and x.placements == ("S0",)
    assert x.spec.shape == (1, 0) and sorted(case.args[1:]) == [0, 1]
    assert results[0] is None and results[1][0].kind is Kind.SHAPE
