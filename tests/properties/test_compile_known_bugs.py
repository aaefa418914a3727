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


def _case(**fields) -> ddp.CompiledDDPCase:
    """The smallest compiled DDP case (one 1->1 layer, batch 1 per rank, aot_eager, float32), with ``fields``."""
    config = DDPConfig(widths=(1, 1), batch_sizes=(1, 1), bucket_cap_mb=fields.pop("bucket_cap_mb", None))
    return ddp.CompiledDDPCase(config, torch.float32, "aot_eager", **fields)


def test_a_sub_mib_bucket_cap_under_compile_is_the_known_first_bucket_bug(rank_pool):
    case = _case(bucket_cap_mb=1e-3)
    assert known_bugs.reproduces(FIRST_BUCKET_BUG, "compile", {"case": case}, lambda: ddp.check(rank_pool, case)), (
        known_bugs.fixed_message(FIRST_BUCKET_BUG)
    )


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"bucket_cap_mb": 1}, id="a 1 MiB cap"),
        # compiled autograd runs DDP with Dynamo's Python reducer, which builds no DDPOptimizer
        pytest.param({"bucket_cap_mb": 1e-3, "compiled_autograd": True}, id="compiled autograd"),
    ],
)
def test_the_neighbouring_cases_train_as_eager_ddp(rank_pool, fields):
    ddp.check(rank_pool, _case(**fields))
