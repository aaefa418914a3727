"""Faults: a rank that dies at a drawn point (before, during or after a collective, in DDP's backward,
inside a DCP save) leaves its survivors an error within the group's timeout, a fresh group that works, and
no half-written checkpoint loaded as if complete (``fuzzdist.properties.faults``).

Each example starts a world of its own processes (it kills one of them), not the shared rank pool: it runs
a share of the profile's examples."""

from __future__ import annotations

from hypothesis import given, settings

from fuzzdist.properties import faults

_SHARE = 5  # each example starts 2 or 3 processes and waits for a death: a fifth of the profile's examples


@given(case=faults.fault_cases())
def test_survivors_get_an_error_and_recover(case):
    """Every survivor of the drawn death gets an error within the group's timeout (or the documented result
    of a call that did not need the dead rank), then a fresh group of the survivors works, and a checkpoint
    whose save did not finish is refused by ``dcp.load``."""
    faults.check(case)


test_survivors_get_an_error_and_recover = settings(max_examples=max(2, settings().max_examples // _SHARE))(
    test_survivors_get_an_error_and_recover
)
