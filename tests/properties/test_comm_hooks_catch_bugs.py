"""The communication-hook properties can fail: with a planted hook under DDP, fuzzdist catches the
bug and shrinks it to a minimal example."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from helpers.minimal import minimal_failure
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from fuzzdist import strategies as fst
from fuzzdist.properties import comm_hooks

# The shrunk examples below are those of 2 ranks.
pytestmark = pytest.mark.fuzzdist(world_size=2)


def bucket_dropping_hook(
    process_group: dist.ProcessGroup,
    bucket: dist.GradBucket,
) -> torch.futures.Future[torch.Tensor]:
    """``allreduce_hook``, except that bucket 1 is never communicated: each rank keeps its own gradient."""
    if bucket.index() == 1:
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut
    return default_hooks.allreduce_hook(process_group, bucket)


def powersgd_without_error_feedback(
    state: powerSGD_hook.PowerSGDState,
    bucket: dist.GradBucket,
) -> torch.futures.Future[torch.Tensor]:
    """``powerSGD_hook`` that forgets the carried error before every step: the error is recorded but
    never fed back."""
    state.error_dict.pop(bucket.index(), None)
    return powerSGD_hook.powerSGD_hook(state, bucket)


for _hook in (bucket_dropping_hook, powersgd_without_error_feedback):  # register_comm_hook checks these
    _hook.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


def test_allreduce_property_catches_a_dropped_bucket(rank_pool):
    """A hook that leaves one bucket un-reduced."""

    def check(case, dtype, seed):
        comm_hooks.check_compression(rank_pool, case, dtype, seed, hook=bucket_dropping_hook)

    f = minimal_failure(
        check,
        case=comm_hooks.compression_cases(2, hooks=("allreduce",)),
        dtype=comm_hooks.DTYPES,
        seed=comm_hooks.SEEDS,
    )
    # Needs a bucket with index 1, so two buckets.  The 1->1 model alone is 8 bytes: one bucket under
    # every cap (the smallest, 1e-5 MiB, is 10.5 bytes).  The first extra parameters in shrink order
    # are the unused layer's (a boolean drawn before wider layers; it brings find_unused_parameters),
    # and only the 1e-5 MiB cap splits them off: buckets are filled in reverse registration order, so
    # bucket 0 holds the unused layer and bucket 1 the 1->1 layer, whose gradients stay local.
    assert f.case == comm_hooks.CompressionCase(
        fst.DDPConfig(
            widths=(1, 1), batch_sizes=(1, 1), unused_parameters=True, bucket_cap_mb=1e-5, find_unused_parameters=True
        )
    ), f.case
    assert f.dtype == torch.float32 and f.seed == 0
    assert "step 0 grad layers.0.weight: not equal to DDP without a hook (bitwise)" in str(f.error)
    assert "step 0 grad layers.0.bias: 1 of 1 elements differ" in str(f.error)


def test_powersgd_property_catches_skipped_error_feedback(rank_pool):
    """A PowerSGD hook that never adds the carried error back."""

    def check(case, dtype, seed):
        comm_hooks.check_powersgd(rank_pool, case, dtype, seed, hook=powersgd_without_error_feedback)

    cases = comm_hooks.powersgd_cases(2).filter(
        lambda c: not c.batched and not c.config.find_unused_parameters and c.config.bucket_cap_mb is None
    )
    f = minimal_failure(check, case=cases, dtype=comm_hooks.DTYPES, seed=comm_hooks.SEEDS)
    # Single-bucket models without find_unused_parameters only: over several buckets powerSGD_hook's
    # compressed steps can hang (docs/findings/powersgd-multiple-buckets-hangs/), and this test is about EF.
    # Error feedback needs start_powerSGD_iter >= 2 (PowerSGDState refuses less), and the skipped
    # error only shows once one was carried: step 2 is the first PowerSGD step (it creates the
    # error: each rank's input minus the mean, non-zero as the ranks' batches differ), step 3 must
    # feed it back, so 4 steps.  Everything else shrinks to its minimum: the 1->1 model, rank 1,
    # rate 0 (both 1x1 gradients compressed, losslessly), no warm start, epsilon 0.
    assert f.case == comm_hooks.PowerSGDCase(
        fst.DDPConfig(widths=(1, 1), batch_sizes=(1, 1), steps=4),
        batched=False,
        rank=1,
        start_iter=2,
        min_compression_rate=0.0,
        error_feedback=True,
        warm_start=False,
        epsilon=0.0,
    ), f.case
    assert f.dtype == torch.float32 and f.seed == 0
    assert "step 3 bucket 0 rank 0 error feedback" in str(f.error)


def test_hook_against_ddp_at_3_ranks_allows_the_terms_rounding_but_not_a_lost_term():
    """At 3 ranks a hook and DDP's own reducer round differently (1/3 is inexact).  The allowance is
    relative to the terms, not the result: with a loss scaled by 2**14 the ranks' gradients can be
    large and cancel, so the result keeps few exact bits (a campaign met this); a lost rank's term
    is still far outside it."""
    from fuzzdist.properties.comm_hooks.common import _same_as_vanilla

    terms = [torch.tensor([16384.0, 1.0]), torch.tensor([-16384.0, 2.0]), torch.tensor([0.01, 3.0])]
    mean = (sum(t.double() for t in terms) / 3).float()
    rounded_apart = mean + torch.tensor([0.002, 0.0])  # last bits of the 16384/3 terms, both ways
    assert not torch.allclose(mean, rounded_apart, rtol=1.3e-6, atol=1e-5)  # a fixed tolerance refuses it
    assert _same_as_vanilla(mean, rounded_apart, 3, torch.float32, terms)
    lost = ((terms[0] + terms[1]) / 3).float()  # rank 2's term missing
    assert not _same_as_vanilla(mean, lost, 3, torch.float32, terms)
