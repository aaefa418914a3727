"""DTensor operators: for a drawn operator, inputs, mesh and placements (Shard, Replicate, Partial), the
DTensor result, its placements, its inputs afterwards and its gradients equal the local operator's on the
full tensors (``fuzzdist.properties.dtensor_ops``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    from fuzzdist.properties import dtensor_ops
except ImportError as exc:  # torch without the DTensor API
    pytest.skip(str(exc), allow_module_level=True)


# An example runs several operators' DTensor and local forms and backward, gathering every output: seconds
# each on a loaded 2-core machine, so the pool's 30 s default would call slow examples hangs.  The slowest
# is scaled_dot_product_attention with a sharded operand, the first time a shape and placement is seen:
# DTensor traces its decomposition once per candidate placement (5 per 4-D input, 125), and each of those
# traces the inner math attention's 125 again, about 24 CPU-seconds on every rank (finite: a second call,
# cached, takes a second).  Two ranks on the loaded 2-core machine took 130 s for it; four, sharing the
# cores, need about twice that.
@pytest.mark.fuzzdist(world_size=[2, 3, 4], timeout=300.0)
@given(data=st.data())
def test_dtensor_operator_matches_local(rank_pool, data):
    """A drawn operator on DTensors with drawn placements on a 1-D or 2-D mesh: outputs, placements,
    inputs afterwards and gradients are the local operator's on the full tensors."""
    case = data.draw(dtensor_ops.op_cases(rank_pool.world_size), label="case")
    dtensor_ops.check(rank_pool, case)


# An example costs tens of milliseconds once a rank is warm, but a fresh rank's first one imports
# torch._dynamo (seconds) and every output and gradient is gathered with full_tensor(): a tenth of the
# profile's examples, at least 2, keeps CI's time bounded;
# campaigns (`fuzzdist run`) give the family as many as the schedule does.
_SHARE = 10
test_dtensor_operator_matches_local = settings(max_examples=max(2, settings().max_examples // _SHARE))(
    test_dtensor_operator_matches_local
)
