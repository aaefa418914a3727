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
from fuzzdist.properties.dtensor_ops.operands import Alias, Operand, is_partial

pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk(pool, rules, *ops, partial_inputs=True):
    """The property over ``ops`` with ``rules`` entered on the ranks (``partial_inputs``: Partial operands
    drawn too); the minimal failure."""
    cases = dtensor_ops.op_cases(pool.world_size, ops=ops)
    if not partial_inputs:
        cases = cases.filter(
            lambda case: not any(is_partial(n) for o in _operands(case) if isinstance(o, Operand) for n in o.placements)
        )
    f = minimal_failure(partial(dtensor_ops.check, pool, rules=rules), case=cases)
    return f.case, f.results


def _operands(case):
    return case.operands


def test_catches_a_product_of_partials_kept_partial(rank_pool):
    case, results = _shrunk(rank_pool, planted.mul_keeps_partial_product, "pointwise.mul")
    # both operands must be Partial(sum) for the planted rule to apply; the smallest is one float32 element
    # as Partial(sum) on the 1-D mesh, passed as both operands (an alias draws no placement of its own, so
    # it is shorter than a second operand): the sum of the pieces' squares misses the cross terms
    a, b = _operands(case)
    assert case.mesh_shape == (2,)
    assert a.placements == ("P+",) and b == Alias(0)
    assert a.spec.shape == (1,) and a.spec.dtype == torch.float32
    for problems in results:
        assert problems[0].kind is Kind.MISMATCH and problems[0].what == "output 0: full_tensor()"


def test_catches_a_sum_over_a_sharded_dim_said_replicate(rank_pool):
    case, results = _shrunk(rank_pool, planted.sum_partial_as_replicate, "reductions.sum", partial_inputs=False)
    # (A Partial(sum) input, drawn before Shard, makes the sum Partial too: left out to test the sharded dim.)
    # a sum over the sharded dim of the smallest tensor: (1,) as Shard(0) over 2 ranks, rank 1's piece
    # empty; each rank keeps its own partial sum as the "replicated" one, so rank 1 has 0
    (x,) = _operands(case)
    assert case.mesh_shape == (2,) and x.placements == ("S0",)
    assert x.spec.shape == (1,) and x.spec.dtype == torch.float32
    assert dict(case.kwargs)["dim"] == [0]
    assert results[0] is None
    assert results[1][0].kind is Kind.MISMATCH and results[1][0].got == 0


def test_catches_an_mm_whose_partial_result_is_said_replicate(rank_pool):
    case, results = _shrunk(rank_pool, planted.mm_partial_as_replicate, "matrix.mm")
    # mm's output is Partial in two ways: a contraction dim k sharded in both operands, or a Partial(sum)
    # operand (mm is linear in each).  Said Replicate, each rank's own product is taken for the whole.
    # A sharded contraction needs k >= 2: DTensor shards no dim smaller than the mesh dim
    # (``is_tensor_shardable`` in ``torch/distributed/tensor/_ops/utils.py``, asked by the mm strategies),
    # so (1, 1) @ (1, 1) with k "sharded" is replicated first and is right.  A Partial operand needs no
    # sharded dim: (1, 1) @ (1, 1), the first operand Replicate (the first placement drawn) and the second
    # Partial(sum), is the smallest (an empty output can't differ), and every rank holds its piece's
    # product, not the sum of them.
    a, b = _operands(case)
    assert case.mesh_shape == (2,)
    assert a.spec.shape == (1, 1) and b.spec.shape == (1, 1)
    assert a.placements == ("R",) and b.placements == ("P+",)
    for problems in results:
        assert problems[0].kind is Kind.MISMATCH and problems[0].subject == ("output", 0)


def test_catches_an_mm_over_a_sharded_contraction_said_replicate(rank_pool):
    case, results = _shrunk(rank_pool, planted.mm_partial_as_replicate, "matrix.mm", partial_inputs=False)
    # Without Partial operands the output is Partial only where k is sharded, which needs k >= 2 (above):
    # (1, 2) @ (2, 1) with k sharded in either operand (DTensor shards the other one's k for free), so each
    # rank holds the product of its own column and row, one of the two terms.
    a, b = _operands(case)
    assert case.mesh_shape == (2,)
    assert a.spec.shape == (1, 2) and b.spec.shape == (2, 1)
    assert "S1" in a.placements or "S0" in b.placements
    for problems in results:
        assert problems[0].kind is Kind.MISMATCH and problems[0].subject == ("output", 0)


def test_catches_a_transpose_keeping_its_shard_dim(rank_pool):
    case, results = _shrunk(rank_pool, planted.transpose_keeps_shard_dim, "views.transpose")
    # (1, 0) as Shard(0), its dims swapped: the output's Shard(0) names the wrong dim; rank 0 holds the
    # whole row, so it sees nothing, rank 1's empty (0, 0) piece gathers into the wrong shape
    (x,) = _operands(case)
    assert case.mesh_shape == (2,) and x.placements == ("S0",)
    assert x.spec.shape == (1, 0) and sorted(case.args[1:]) == [0, 1]
    assert results[0] is None and results[1][0].kind is Kind.SHAPE


def test_catches_an_embedding_whose_masked_partial_result_is_said_replicate(rank_pool):
    case, results = _shrunk(
        rank_pool, planted.embedding_partial_as_replicate, "indexing.embedding", partial_inputs=False
    )
    # The output is Partial only where the table's rows are sharded (each rank looks up its own rows; the
    # ids it doesn't own are clamped into its rows and masked out only when the Partial is reduced).  A
    # Partial(sum) table, drawn before Shard, fails too (DTensor has no Partial-table strategy and may
    # reduce-scatter it to rows first): left out, to test the row-sharded table.  DTensor shards no dim
    # smaller than the mesh dim, so 2 rows are the fewest.  One id (shape (1,), value 0) into a (2, 1) table
    # sharded by rows: rank 0 owns row 0 and is right; rank 1 keeps the unmasked lookup of its own row (row 1) instead.
    ids, table = _operands(case)
    assert case.mesh_shape == (2,)
    assert ids.spec.shape == (1,) and ids.placements == ("R",)
    assert table.spec.shape == (2, 1) and table.placements == ("S0",)
    assert results[0] is None
    assert results[1][0].kind is Kind.MISMATCH and results[1][0].subject == ("output", 0)


def test_catches_a_sort_run_on_its_pieces(rank_pool):
    case, results = _shrunk(rank_pool, planted.sort_without_replicating_its_dim, "joins.sort", partial_inputs=False)
    # (Partial inputs, drawn before Shard, are left out: (2,) as Partial(sum) fails too, its indices summed.)
    # Sorting a dim needs the whole dim on a rank: the rule replicates it first.  Run on the pieces, one
    # element is never wrong (a Shard puts it whole on rank 0; Partial pieces sort to themselves, their
    # indices 0 reduce to 0), so the smallest is (2,) as Shard(0): each rank's index is 0 into its own
    # one-element piece, and the gathered indices [0, 0] are no permutation of [0, 1].
    (x,) = _operands(case)
    assert case.mesh_shape == (2,)
    assert x.spec.shape == (2,) and x.placements == ("S0",)
    for problems in results:
        assert any(p.kind is Kind.MISMATCH and p.subject == ("output", 1) for p in problems)
