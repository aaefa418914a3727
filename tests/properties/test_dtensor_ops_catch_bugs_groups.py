"""The DTensor-operator property catches a sharding rule planted wrong in the nn group and in each of the
later groups (tensors, conv, random_values, foreach), and shrinks it to the minimum its comment derives."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_dtensor_ops as planted
from helpers.minimal import minimal_failure

from fuzzdist.problems import Kind
from fuzzdist.properties import dtensor_ops
from fuzzdist.properties.dtensor_ops.operands import Operand, is_partial

pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk(pool, rules, *ops, partial_inputs=True, aliases=True):
    """The property over ``ops`` with ``rules`` entered on the ranks (``partial_inputs``: Partial operands
    drawn too; ``aliases``: an operand passed twice drawn too); the minimal failure."""
    cases = dtensor_ops.op_cases(pool.world_size, ops=ops)
    if not partial_inputs:
        cases = cases.filter(lambda case: not any(is_partial(n) for o in _placed(case) for n in o.placements))
    if not aliases:
        cases = cases.filter(lambda case: len(_placed(case)) == len(case.operands))
    f = minimal_failure(partial(dtensor_ops.check, pool, rules=rules), case=cases)
    return f.case, f.results


def _placed(case):
    """The case's operands that are not aliases of another."""
    return [o for o in case.operands if isinstance(o, Operand)]


def test_catches_a_softmax_run_on_its_pieces(rank_pool):
    case, results = _shrunk(rank_pool, planted.softmax_without_replicating_its_dim, "nn.softmax")
    # A softmax needs its whole dim on a rank.  Run on the pieces, one element as Shard(0) is right (rank 0
    # holds it whole, rank 1 nothing), but as Partial(sum) each rank's one-element piece softmaxes to 1,
    # and the Partial output adds them to 2 where the softmax of one element is 1: (1,) as Partial(sum),
    # the first placement after Replicate and Shard(0) that fails, on the 1-D mesh.
    (x,) = case.operands
    assert case.mesh_shape == (2,), case
    assert x.spec.shape == (1,) and x.placements == ("P+",), case
    for problems in results:
        assert problems[0].kind is Kind.MISMATCH and problems[0].subject == ("output", 0)


def test_catches_a_flip_run_on_its_pieces(rank_pool):
    case, results = _shrunk(rank_pool, planted.flip_without_replicating_its_dim, "tensors.flip")
    # Flipping a dim needs it whole on a rank.  One element is never wrong (Shard(0) puts it whole on rank
    # 0; a Partial piece flips to itself), so the smallest is (2,) as Shard(0) flipped along dim 0: each
    # rank flips its own one-element piece, and the gathered result is the input, not its reverse.
    (x,) = case.operands
    assert case.mesh_shape == (2,), case
    assert x.spec.shape == (2,) and x.placements == ("S0",) and case.args[1] == [0], case
    for problems in results:
        assert problems[0].kind is Kind.MISMATCH and problems[0].subject == ("output", 0)


def test_catches_an_avg_pool_whose_shard_is_said_replicate(rank_pool):
    case, results = _shrunk(rank_pool, planted.avg_pool_shard_as_replicate, "conv.avg_pool1d", partial_inputs=False)
    # (A Partial input may be reduce-scattered to a Shard first, which the rule then mislabels too: left out,
    # to test the sharded input.)  DTensor shards no dim smaller than the mesh dim (``is_tensor_shardable``
    # in ``torch/distributed/tensor/_ops/utils.py``), so a Shard needs a dim of 2: the channels (the batch
    # may be empty, and its size 0 is the shortest draw of ``SIZES``: a branch with no value after it).  So
    # (0, 2, 1) as Shard(1), pooled by a kernel of 1: each rank's (0, 1, 1) output is said to be the whole
    # (0, 2, 1), and every rank's full_tensor() has the wrong shape.
    (x,) = case.operands
    assert case.mesh_shape == (2,), case
    assert x.spec.shape == (0, 2, 1) and x.placements == ("S1",) and case.args[1] == 1, case
    for problems in results:
        assert problems[0].kind is Kind.SHAPE and problems[0].subject == ("output", 0)


def test_catches_a_dropout_whose_shard_is_said_replicate(rank_pool):
    case, results = _shrunk(rank_pool, planted.dropout_shard_as_replicate, "random_values.native_dropout_p0")
    # (1,) as Shard(0): rank 0 holds it whole and is right; rank 1's empty piece is said to be the whole
    # output (and mask), so its full_tensor() is empty.
    (x,) = case.operands
    assert case.mesh_shape == (2,), case
    assert x.spec.shape == (1,) and x.placements == ("S0",), case
    assert results[0] is None
    assert results[1][0].kind is Kind.SHAPE and results[1][0].subject == ("output", 0)


def test_catches_a_foreach_add_whose_partial_is_said_replicate(rank_pool):
    case, results = _shrunk(rank_pool, planted.foreach_add_partial_as_replicate, "foreach.add_list", aliases=False)
    # The output is Partial(sum) where one operand is Partial(sum): DTensor makes a Replicate one Partial
    # (rank 0 keeps it, the others hold zeros) rather than reduce.  Lists of one (1,) float32 tensor, the
    # first Replicate (the first placement drawn) and the second Partial(sum), on the 1-D mesh: each rank
    # keeps its own partial sum.  (An alias, passing one Partial(sum) DTensor in both lists, is a shorter
    # draw the shrinker does not reach from there: left out.)
    a, b = case.operands
    assert case.mesh_shape == (2,), case
    assert a.spec.shape == b.spec.shape == (1,) and a.spec.dtype == torch.float32, case
    assert a.placements == ("R",) and b.placements == ("P+",), case
    assert any(problems and problems[0].kind is Kind.MISMATCH for problems in results)
