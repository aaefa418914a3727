"""Checks of the arguments a strategy function is given, shared by the strategy modules."""

from __future__ import annotations

from fuzzdist.errors import InvalidStrategyArgument


def check_int(name: str, value: object, minimum: int) -> int:
    """``value``, when it is an int (not a bool) of at least ``minimum``; InvalidStrategyArgument otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidStrategyArgument(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise InvalidStrategyArgument(f"{name} must be >= {minimum}, got {value!r}")
    return value
