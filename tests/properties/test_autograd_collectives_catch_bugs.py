"""The autograd-collectives property can fail: with a planted bug (a wrong forward value or a
wrong gradient), fuzzdist catches it and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_collectives as planted
from helpers.minimal import minimal_failure

from fuzzdist.errors import CapabilityError
from fuzzdist.properties import collectives

# The shrunk examples asserted below are those of 2 ranks.
pytestmark = pytest.mark.fuzzdist(world_size=2)


def _shrunk_failure(pool, name, **impl):
    """The property for collective ``name`` with ``impl`` swapped in; the minimal failure."""
    cases = collectives.cases(name, pool.world_size, collectives.supported(pool, name))
    return minimal_failure(partial(collectives.check, pool, name, **impl), case=cases)


def _problems(results, rank):
    return " | ".join(map(str, results[rank] or []))


def test_catches_all_gather_swapping_two_ranks(rank_pool):
    f = _shrunk_failure(rank_pool, "all_gather", all_gather=planted.all_gather_swapping_ranks_0_and_1)
    # the smallest input the bug touches: 2 elements (shape (2,), or with size-1 dims around them)
    assert f.case.spec.numel == 2 and f.case.spec.dtype == torch.float32 and f.case.spec.pattern == "random"
    for rank in range(rank_pool.world_size):  # every rank sees both tensors swapped...
        assert "output 0: " in _problems(f.results, rank) and "output 1: " in _problems(f.results, rank)
        assert "grad of input: " in _problems(f.results, rank)  # ...and the gradients follow the swap


def test_catches_all_reduce_dropping_the_last_rank(rank_pool):
    f = _shrunk_failure(rank_pool, "all_reduce", all_reduce=planted.all_reduce_dropping_last_rank)
    assert f.case.spec.numel == 4 and f.case.spec.dtype == torch.float32 and f.case.op == "SUM"
    for rank in range(rank_pool.world_size):
        assert "output: " in _problems(f.results, rank)
    # the last rank's contribution was multiplied by 0, so its gradient is 0 too; rank 0's is right
    assert "grad of input: " in _problems(f.results, rank_pool.world_size - 1)
    assert "grad of input: " not in _problems(f.results, 0)


def test_catches_a_wrong_all_reduce_gradient(rank_pool):
    f = _shrunk_failure(rank_pool, "all_reduce", all_reduce=planted.all_reduce_with_local_grad_for_matrices)
    assert f.case.spec.shape == (1, 1) and f.case.spec.dtype == torch.float32  # the smallest 2-d tensor
    assert f.case.op == "SUM" and f.case.grad
    for rank in range(rank_pool.world_size):  # forward right, gradient wrong
        assert _problems(f.results, rank).startswith("grad of input: ")
        assert "output" not in _problems(f.results, rank)


def test_catches_a_broadcast_gradient_left_on_non_source_ranks(rank_pool):
    f = _shrunk_failure(rank_pool, "broadcast", broadcast=planted.broadcast_with_grad_off_source)
    assert f.case.spec.numel == 1 and f.case.spec.dtype == torch.float32 and f.case.root == 0
    assert f.results[f.case.root] is None  # the source's gradient is the right sum
    assert all(
        _problems(f.results, r).startswith("grad of input (not the source): ")
        for r in range(rank_pool.world_size)
        if r != f.case.root
    )


class _PoolWithoutReduceScatter:
    """Answers the support probe as a torch whose gloo has no reduce_scatter would."""

    world_size = 97  # a key no real pool of the session uses in the probe cache

    def run(self, fn, name, combos):
        return [{combo: "RuntimeError: not supported" for combo in combos}] * self.world_size


class _PoolRecordingTheProbe:
    """Answers the support probe as a gloo taking everything it is asked, and records what it was asked."""

    world_size = 98  # a key no real pool of the session uses in the probe cache

    def __init__(self):
        self.asked = []

    def run(self, fn, name, combos):
        self.asked += combos
        return [{combo: None for combo in combos}] * self.world_size


@pytest.mark.parametrize("name", collectives.REDUCTIONS)
def test_only_the_ops_the_installed_gloo_takes_are_probed_and_drawn(monkeypatch, name):
    """The ops come from gloo_reduce_ops (torch 2.6.0's gloo refuses AVG): one it leaves out is neither
    probed on the ranks nor drawn."""
    monkeypatch.setattr(collectives, "gloo_reduce_ops", lambda api, dtype: ("SUM", "PRODUCT", "MIN", "MAX"))
    pool = _PoolRecordingTheProbe()
    allowed = collectives.supported(pool, name)
    assert {op for _, op in allowed} == {"SUM", "PRODUCT", "MIN", "MAX"}
    assert "AVG" not in {op for _, op in pool.asked}


def test_an_unsupported_collective_skips_every_caller_not_just_the_first():
    pool = _PoolWithoutReduceScatter()
    for _ in range(2):  # the second answer comes from the probe cache (the plugin turns it into a skip)
        with pytest.raises(CapabilityError, match="reduce_scatter is not supported"):
            collectives.supported(pool, "reduce_scatter")


@pytest.mark.parametrize("name", ["reduce", "all_reduce", "reduce_scatter"])
def test_float16_product_is_drawn(rank_pool, name):
    try:
        allowed = collectives.supported(rank_pool, name)
    except CapabilityError as exc:  # a gloo without (list-form) reduce_scatter: torch 2.6.0's
        assert name == "reduce_scatter", exc  # the others every gloo has
        pytest.skip(str(exc))
    assert (torch.float16, "PRODUCT") in allowed


def test_float16_product_accepts_what_some_order_gives_overflow_included():
    f16 = torch.float16
    terms = [torch.tensor(t, dtype=f16) for t in ([300.0, 2.0, 3.0], [300.0, 4.0, 5.0], [0.001, 8.0, 1.0])]
    # element 0: 300 * 300 overflows float16 in one order (inf), 300 * 0.001 * 300 = 90 in another: both accepted
    for first in (float("inf"), 90.0):
        assert collectives._reduced("output", torch.tensor([first, 64.0, 15.0], dtype=f16), terms, "PRODUCT") is None
    wrong = collectives._reduced("output", torch.tensor([90.0, 65.0, 15.0], dtype=f16), terms, "PRODUCT")
    assert wrong is not None and (wrong.count, wrong.size, wrong.index) == (1, 3, 1)
