"""The DDP parity property can fail: with a faulty process group planted under DDP,
fuzzdist catches the bug and shrinks it to a minimal example."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
import torch
from helpers import planted_pg
from helpers.minimal import minimal_failure
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.properties import ddp

TRIVIAL = fst.DDPConfig(widths=(1, 1), batch_sizes=(1, 1))
# The shrunk examples below are those of 2 ranks.
pytestmark = pytest.mark.fuzzdist(world_size=2)


class Caught(NamedTuple):
    """The shrunk failing example, its failure, and what the ranks returned (None if they raised)."""

    config: fst.DDPConfig
    dtype: torch.dtype
    seed: int
    schedule: fst.CompletionOrder | None
    error: AssertionError
    results: list[dict[str, Any]] | None


def _run_ddp_property(pool, wrap, wrap_args=(), wrap_kwargs=None, schedules=None) -> Caught:
    """The DDP parity property over ``wrap(ctx.group, *wrap_args, [schedule], **wrap_kwargs)``;
    the minimal failure."""

    def check(config, dtype, seed, schedule):
        args = tuple(wrap_args) + (() if schedule is None else (schedule,))
        ddp.check(pool, config, dtype, seed, wrap=wrap, wrap_args=args, wrap_kwargs=wrap_kwargs)

    f = minimal_failure(
        check,
        config=fst.ddp_configs(pool.world_size),
        dtype=ddp.DTYPES,
        seed=ddp.SEEDS,
        schedule=st.none() if schedules is None else schedules,
    )
    return Caught(f.config, f.dtype, f.seed, f.schedule, f.error, f.results)


def _ranks_agree(results: list[dict[str, Any]]) -> bool:
    """Whether every rank ended with the same gradients and parameters, bit for bit."""
    first = results[0]
    return all(
        r["grad_digests"] == first["grad_digests"] and r["param_digest"] == first["param_digest"] for r in results
    )


def _bucket_sizes(config: fst.DDPConfig) -> list[int]:
    """Elements per parameter of the model (DDP's first backward puts them all in one bucket)."""
    return [p.numel() for p in config.build_model(0).parameters()]


_recorders: list[planted_pg.RecordingPG] = []


def _recording(inner):
    pg = planted_pg.RecordingPG(inner)
    _recorders.append(pg)
    return pg


def allreduce_sizes(ctx, config, dtype, seed) -> list[int]:
    """On every rank: the sizes of the allreduces DDP issues for this example."""
    _recorders.clear()
    ddp.ddp_parity(ctx, config, dtype, seed, wrap=_recording)
    return _recorders[0].allreduce_numels


def test_ddp_parity_catches_a_corrupted_large_bucket(rank_pool):
    """A group that corrupts allreduces of 8 or more elements."""
    config, dtype, seed, _, error, _ = _run_ddp_property(
        rank_pool, planted_pg.CorruptingLargeAllreducePG, wrap_args=(8,)
    )
    # Shrunk to the smallest model whose single bucket reaches 8 elements: one
    # layer 1 -> 4 (4 weights + 4 biases), DDP defaults, batch 1, one SGD step.
    assert config == fst.DDPConfig(widths=(1, 4), batch_sizes=(1, 1)), config
    assert sum(_bucket_sizes(config)) == 8
    assert dtype == torch.float32 and seed == 0
    assert "differs from the local reference" in str(error)
    assert "step 0 grad layers.0.bias: 1 of 4 elements differ" in str(error)


def test_ddp_parity_catches_a_work_completed_before_its_data(rank_pool):
    """A group whose allreduce Work completes before the reduced data has landed."""
    config, dtype, seed, _, error, results = _run_ddp_property(rank_pool, planted_pg.EarlyCompletingPG)
    # Every configuration shows it: shrunk all the way to the trivial one.
    assert config == TRIVIAL, config
    assert dtype == torch.float32 and seed == 0
    # Each rank kept its own scaled gradient: wrong everywhere, and the ranks disagree.
    assert "differs from the local reference on ranks [0, 1]" in str(error)
    assert not _ranks_agree(results)


def test_ddp_parity_catches_a_dropped_contribution(rank_pool):
    """A group that drops the last rank's contribution to the remainder of a chunked allreduce."""
    config, dtype, seed, _, error, results = _run_ddp_property(rank_pool, planted_pg.TailDroppingAllreducePG)
    # Only allreduces with numel % world_size != 0 lose rank 1's contribution.  Every
    # dimension the bug does not depend on shrinks away...
    assert config.batch_sizes == (1, 1) and config.steps == 1 and config.optimizer == "sgd", config
    assert dtype == torch.float32 and seed == 0
    # ...to a small model with an odd-sized bucket.  Which one depends on the shrinker's
    # path: (2, 1) with DDP's defaults (one bucket of 3) or, as Hypothesis 6.170 finds,
    # (1, 1, 1) with a 1e-5 MiB bucket cap (buckets of 1).
    assert config.depth <= 2 and max(config.widths) <= 2, config
    sizes = rank_pool.run(allreduce_sizes, config, dtype, seed)[0]
    assert any(n % rank_pool.world_size for n in sizes), sizes
    assert "differs from the local reference on ranks [0, 1]" in str(error)
    # The ranks agree with one another, bit for bit: only the comparison with the
    # local reference catches this one.
    assert _ranks_agree(results)


def test_ddp_parity_catches_a_fifo_completion_assumption(rank_pool):
    """A reordering group that puts each result into the oldest pending allreduce: only
    wrong when completions are reordered, which only the drawn schedules do."""
    config, dtype, seed, schedule, error, _ = _run_ddp_property(
        rank_pool,
        planted_pg.FifoCompletionPG,
        wrap_kwargs={"ops": ("allreduce",)},
        schedules=ddp.completion_schedules(),
    )
    # Needs two allreduces in flight completing out of issue order: shrunk to two
    # works released second-first...
    assert schedule.resolution_order == (1, 0), schedule
    # ...and the smallest DDP setup with two allreduces in one backward: the trivial
    # model with find_unused_parameters, whose backward allreduces the bucket, then the
    # map of used parameters.  Swapped, the gradients receive the summed map (2.0).
    assert config == fst.DDPConfig(widths=(1, 1), batch_sizes=(1, 1), find_unused_parameters=True), config
    assert dtype == torch.float32 and seed == 0
    assert "got 2, expected" in str(error)
