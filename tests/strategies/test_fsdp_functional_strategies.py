"""fsdp_configs and functional_cases shrink to the minimum their docstrings name, and FSDPConfig
rejects what FSDP2 does not take, early, saying what to do."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import find as hypothesis_find

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.strategies import TensorSpec

_QUIET = settings(database=None, max_examples=200, suppress_health_check=list(HealthCheck))


def minimal(strategy):
    return hypothesis_find(strategy, lambda _: True, settings=_QUIET)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_fsdp_configs_shrink_to_the_trivial_setup(world_size):
    assert minimal(fst.fsdp_configs(world_size)) == fst.FSDPConfig(
        widths=(1, 1), batch_sizes=(1,) * world_size, mesh_shape=(world_size,)
    )


def test_fsdp_config_rejects_what_fully_shard_does_not_take():
    with pytest.raises(InvalidArgument, match="must hold exactly the 4 ranks"):
        fst.FSDPConfig(batch_sizes=(1,) * 4, mesh_shape=(3,))
    with pytest.raises(InvalidArgument, match="divisor of the shard dim size 4"):
        fst.FSDPConfig(batch_sizes=(1,) * 4, mesh_shape=(4,), reshard_after_forward=3)
    with pytest.raises(InvalidArgument, match="param_dtype"):
        fst.FSDPConfig(param_dtype=torch.int32)
    assert fst.FSDPConfig(batch_sizes=(1,) * 4, mesh_shape=(4,), reshard_after_forward=2).shard_size == 4


def test_functional_cases_shrink_to_one_all_reduce():
    functional = pytest.importorskip("fuzzdist.properties.functional")
    case = minimal(functional.functional_cases(2))
    assert case == functional.FunctionalCase(
        calls=(functional.Call("all_reduce", TensorSpec((1,), torch.float32)),),
        order=(0,),
        completions=("wait_tensor",),
        seed=0,
    )
