"""The autograd-collectives property can fail: with a planted bug (a wrong forward value or a
wrong gradient), fuzzdist catches it and shrinks it to a minimal example."""

from __future__ import annotations

import sys
from pathlib import Path

import planted_collectives as planted
import pytest
import torch
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "properties"))
import test_autograd_collectives as prop  # noqa: E402

# The shrunk examples asserted below are those of 2 ranks (over 2 ranks, for instance, 3 elements
# is the smallest uneven split whose last shard is not empty).
pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk_failure(pool, name, **impl):
    """Run the property for collective ``name`` with ``impl`` swapped in; the shrunk failing
    example as (case, per-rank problems)."""
    failing: list = []
    allowed = prop.supported(pool, name)

    @settings(max_examples=300, database=None, derandomize=True, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=prop.cases(name, pool.world_size, allowed))
    def check(case):
        results = pool.run(prop.CHECKS[name], case, **impl)
        if any(results):
            failing.append((case, results))
            raise AssertionError(results)

    with pytest.raises(AssertionError):
        check()
    assert failing, "the planted bug was never caught"
    return failing[-1]  # Hypothesis replays the minimal example last


def _problems(results, rank):
    return " | ".join(results[rank] or [])


def test_catches_all_gather_swapping_two_ranks(rank_pool):
    case, results = _shrunk_failure(rank_pool, "all_gather",
                                    all_gather=planted.all_gather_swapping_ranks_0_and_1)
    # the smallest input the bug touches: 2 elements (shape (2,), or with size-1 dims around them)
    assert case.spec.numel == 2 and case.spec.dtype == torch.float32 and case.spec.pattern == "random"
    for rank in range(rank_pool.world_size):  # every rank sees both tensors swapped...
        assert "output 0: " in _problems(results, rank) and "output 1: " in _problems(results, rank)
        assert "grad of input: " in _problems(results, rank)  # ...and the gradients follow the swap


def test_catches_all_reduce_dropping_the_last_rank(rank_pool):
    case, results = _shrunk_failure(rank_pool, "all_reduce",
                                    all_reduce=planted.all_reduce_dropping_last_rank)
    assert case.spec.numel == 4 and case.spec.dtype == torch.float32 and case.op == "SUM"
    for rank in range(rank_pool.world_size):
        assert "output: " in _problems(results, rank)
    # the last rank's contribution was multiplied by 0, so its gradient is 0 too; rank 0's is right
    assert "grad of input: " in _problems(results, rank_pool.world_size - 1)
    assert "grad of input: " not in _problems(results, 0)


def test_catches_a_wrong_all_reduce_gradient(rank_pool):
    case, results = _shrunk_failure(rank_pool, "all_reduce",
                                    all_reduce=planted.all_reduce_with_local_grad_for_matrices)
    assert case.spec.shape == (1, 1) and case.spec.dtype == torch.float32  # the smallest 2-d tensor
    assert case.op == "SUM" and case.grad
    for rank in range(rank_pool.world_size):  # forward right, gradient wrong
        assert _problems(results, rank).startswith("grad of input: ")
        assert "output" not in _problems(results, rank)


def test_catches_a_broadcast_gradient_left_on_non_source_ranks(rank_pool):
    case, results = _shrunk_failure(rank_pool, "broadcast",
                                    broadcast=planted.broadcast_with_grad_off_source)
    assert case.spec.numel == 1 and case.spec.dtype == torch.float32 and case.root == 0
    assert results[case.root] is None  # the source's gradient is the right sum
    assert all(_problems(results, r).startswith("grad of input (not the source): ")
               for r in range(rank_pool.world_size) if r != case.root)
