"""The checks a conformance run knows: one per op of ``OPS`` (``fuzzdist.conformance.ops``), then the
composite ones, ``async`` and ``ddp_parity``."""

from __future__ import annotations

from fuzzdist.conformance.ops import OPS

# Composite checks, after the single operations.
ASYNC = "async"
DDP = "ddp_parity"
ALL_CHECKS: tuple[str, ...] = (*OPS, ASYNC, DDP)  # fuzzdist's own ops


def all_checks() -> tuple[str, ...]:
    """Every check, with the ops in ``OPS`` now (an op registered at run time included)."""
    return (*OPS, ASYNC, DDP)
