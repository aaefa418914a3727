"""The compile family's known torch bugs, each on its pinned minimal example: still reproducing (KNOWN through
the registry), recognised by its predicate, and not mistaken for a neighbouring case that torch gets right."""

from __future__ import annotations

import pytest
import torch

from fuzzdist import known_bugs
from fuzzdist.properties.compile import ddp
from fuzzdist.strategies import DDPConfig

pytestmark = pytest.mark.fuzzdist(world_size=2, timeout=300.0)

FIRST_BUCKET_BUG = "ddp-compile-sub-mib-bucket-cap-asserts"
BUFFER_SYNC_BUG = "ddp-python-reducer-skips-buffer-broadcast"


def _case(**fields) -> ddp.CompiledDDPCase:
    """The smallest compiled DDP case (one 1->1 layer, batch 1 per rank, aot_eager, float32), with ``fields``."""
    config = DDPConfig(widths=(1, 1), batch_sizes=(1, 1), **fields.pop("config", {}))
    return ddp.CompiledDDPCase(config, torch.float32, "aot_eager", **fields)


def test_a_sub_mib_bucket_cap_under_compile_is_the_known_first_bucket_bug(rank_pool):
    case = _case(config={"bucket_cap_mb": 1e-3})
    assert known_bugs.reproduces(FIRST_BUCKET_BUG, "compile", {"case": case}, lambda: ddp.check(rank_pool, case)), (
        known_bugs.fixed_message(FIRST_BUCKET_BUG)
    )


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"config": {"bucket_cap_mb": 1}}, id="a 1 MiB cap"),
        # compiled autograd runs DDP with Dynamo's Python reducer, which builds no DDPOptimizer
        pytest.param({"config": {"bucket_cap_mb": 1e-3}, "compiled_autograd": True}, id="compiled autograd"),
        # the Python reducer with buffers DDP doesn't sync, or DDPOptimizer with synced buffers
        pytest.param(
            {"config": {"buffers": True, "broadcast_buffers": False, "steps": 2}, "compiled_autograd": True},
            id="unsynced buffers",
        ),
        pytest.param({"config": {"buffers": True, "steps": 2}}, id="synced buffers, DDPOptimizer"),
    ],
)
def test_the_neighbouring_cases_train_as_eager_ddp(rank_pool, fields):
    ddp.check(rank_pool, _case(**fields))


def test_synced_buffers_under_compiled_autograd_are_the_known_buffer_sync_bug(rank_pool):
    case = _case(config={"buffers": True, "steps": 2}, compiled_autograd=True)
    assert known_bugs.reproduces(BUFFER_SYNC_BUG, "compile", {"case": case}, lambda: ddp.check(rank_pool, case)), (
        known_bugs.fixed_message(BUFFER_SYNC_BUG)
    )
