"""Bad input gets a clear error that says what to do, before any rank process starts."""

from __future__ import annotations

import sys
import threading

import pytest
import torch
from helpers import rank_fns

from fuzzdist import CapabilityError, RankPool


def _no_spawn(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a rank process was spawned for bad input")

    monkeypatch.setattr(RankPool, "_start_set", boom)


@pytest.mark.parametrize("world_size", [0, -1, "2", 1.5, True, None])
def test_bad_world_size(monkeypatch, world_size):
    _no_spawn(monkeypatch)
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        RankPool(world_size)


def test_unknown_backend(monkeypatch):
    _no_spawn(monkeypatch)
    with pytest.raises(ValueError, match="backend 'glooo' is not available.*available: gloo"):
        RankPool(2, backend="glooo")


def test_unknown_device(monkeypatch):
    _no_spawn(monkeypatch)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        RankPool(2, device="tpu")


@pytest.mark.parametrize("timeout", [0, -1, "10"])
def test_bad_timeout(monkeypatch, timeout):
    _no_spawn(monkeypatch)
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        RankPool(2, timeout=timeout)


def test_nccl_on_cpu_ranks(monkeypatch):
    _no_spawn(monkeypatch)
    monkeypatch.setattr("fuzzdist.pool.capabilities.backends.available_backends", lambda: ["gloo", "nccl"])
    with pytest.raises(ValueError, match="nccl.*device='cuda'.*gloo"):
        RankPool(2, backend="nccl", device="cpu")


def test_nccl_without_a_gpu_per_rank(monkeypatch):
    _no_spawn(monkeypatch)
    monkeypatch.setattr("fuzzdist.pool.capabilities.backends.available_backends", lambda: ["gloo", "nccl"])
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    message = "nccl' needs one GPU per rank: world_size=4 but needs 4 GPUs, but 1 is visible"
    with pytest.raises(CapabilityError, match=message):
        RankPool(4, backend="nccl", device="cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu(monkeypatch):
    _no_spawn(monkeypatch)
    with pytest.raises(CapabilityError, match="device='cuda' needs CUDA.*use device='cpu'"):
        RankPool(2, device="cuda")


def test_lambda_and_nested_functions_are_refused_before_sending(rank_pool):
    def nested(ctx):
        return 1

    with pytest.raises(TypeError, match="lambdas and nested functions"):
        rank_pool.run(lambda ctx: 1)
    with pytest.raises(TypeError, match="Define fn at the top level"):
        rank_pool.run(nested)


def test_unpicklable_argument(rank_pool):
    with pytest.raises(TypeError, match="can't be pickled for the rank processes"):
        rank_pool.run(rank_fns.whoami_seed, threading.Lock())


def test_function_the_ranks_cannot_import(rank_pool, tmp_path, monkeypatch):
    module = tmp_path / "driver_only_module.py"
    module.write_text("def fn(ctx):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import driver_only_module

    module.unlink()  # the driver has it loaded; the ranks can't import it any more
    try:
        with pytest.raises(TypeError, match="could not load the function.*top-level function of a module"):
            rank_pool.run(driver_only_module.fn)
    finally:
        sys.modules.pop("driver_only_module", None)
    assert rank_pool.run(rank_fns.broadcast_sum, 2, 1) == [1.0, 1.0]


def test_closed_pool(monkeypatch):
    pool = RankPool(1, timeout=10)
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(rank_fns.whoami)
