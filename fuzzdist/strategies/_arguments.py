"""Checks of the arguments a strategy function is given, shared by the strategy modules."""

from __future__ import annotations

from fuzzdist.errors import InvalidStrategyArgument


def check_int(name: str, value: object, minimum: int) -> int:
    """``value``, when it is an int (not a bool) of at least ``minimum``; InvalidStrategyArgument otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidStrategyArgument(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def check_ints(*arguments: tuple[str, object, int]) -> None:
    """:func:`check_int` of each ``(name, value, minimum)``, in order: a strategy function's whole-number
    arguments, checked before anything is drawn."""
    for name, value, minimum in arguments:
        check_int(name, value, minimum)
