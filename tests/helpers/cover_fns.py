"""Rank functions for the coverage tests: they reach known lines of ``helpers.covered_pkg``."""

from __future__ import annotations

from typing import Any

from helpers.covered_pkg import paths


def classify_on_rank(ctx: Any, value: int) -> str:
    """Every rank takes its own branch of ``paths.classify``."""
    return paths.classify(ctx.rank, value)


def classify_then_fail(ctx: Any, value: int) -> str:
    """As :func:`classify_on_rank`, then rank 1 raises: the lines of a failing example count too."""
    label = paths.classify(ctx.rank, value)
    if ctx.rank == 1:
        raise ValueError("planted failure after the covered lines")
    return label
