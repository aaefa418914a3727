"""Whether the ranks' torch keeps a flight record of gloo's collectives, for tests of certain deadlocks.

A deadlock is proven from the flight record of the ranks' collectives; without one (a torch whose
recorder is NCCL's only, like 2.6.0) every hang is explained from the stacks and declared at the
timeout (docs/hangs.md), so a test that expects a deadlock declared at once skips there, saying why.
"""

from __future__ import annotations

import functools
import os
from unittest import mock

import pytest

from fuzzdist.pool.rank import rank_state

SKIP_REASON = "a certain deadlock is proven from torch's flight record of gloo's collectives, which this torch lacks"


@functools.cache
def gloo_unrecorded() -> str:
    """Why the ranks' flight recorder keeps no record of gloo's collectives ("" where it does), asked as each
    rank asks when it starts (rank_state.enable_flight_recorder), under the ranks' setting."""
    size = os.environ.get("TORCH_FR_BUFFER_SIZE", str(rank_state.FLIGHT_RECORDER_ENTRIES))
    with mock.patch.dict(os.environ, {"TORCH_FR_BUFFER_SIZE": size}):
        return rank_state.recorder_gap("gloo")


def skip_without_gloo_record() -> None:
    """Skip the calling test, with the reason, where the ranks' torch keeps no record of gloo's collectives."""
    if unrecorded := gloo_unrecorded():
        pytest.skip(f"{SKIP_REASON}: {unrecorded}")


def needs_gloo_record() -> pytest.MarkDecorator:
    """A skipif mark for tests that expect a deadlock declared at once (asks torch when the module loads)."""
    unrecorded = gloo_unrecorded()
    return pytest.mark.skipif(bool(unrecorded), reason=f"{SKIP_REASON}: {unrecorded}")
