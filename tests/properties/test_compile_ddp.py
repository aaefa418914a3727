"""The compiled DDP property runs each example as a fresh process would: what DDP's constructor changes
process-wide under compiled autograd's Python reducer is restored after the example."""

from __future__ import annotations

import pytest
import torch

from fuzzdist.properties.compile import ddp
from fuzzdist.strategies import DDPConfig

pytestmark = pytest.mark.fuzzdist(world_size=2, timeout=300.0)


def test_a_compiled_autograd_example_leaves_no_state_for_the_next(rank_pool):
    config = DDPConfig(widths=(1, 1), batch_sizes=(1, 1), find_unused_parameters=True)
    ddp.check(rank_pool, ddp.CompiledDDPCase(config, torch.float32, "aot_eager", compiled_autograd=True))
    # the same config through DDPOptimizer, next on the same ranks: it trains as eager DDP, as it does alone
    ddp.check(rank_pool, ddp.CompiledDDPCase(config, torch.float32, "aot_eager", compiled_autograd=False))
