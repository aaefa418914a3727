"""Branches taken by rank: the coverage tests' known set of lines (see the package docstring)."""


def classify(rank: int, value: int) -> str:
    label = "start"  # reached: all
    if rank == 0:  # reached: all
        label = "zero"  # reached: rank0
    elif rank == 1:  # reached: rank1 rank2
        label = _one(value)  # reached: rank1
    else:
        label = "many"  # reached: rank2
    if value < 0:  # reached: all
        label = "negative"  # reached: never
    return label  # reached: all


def _one(value: int) -> str:
    doubled = value * 2  # reached: rank1
    return f"one-{doubled}"  # reached: rank1


def unused(value: int) -> int:
    return value + 1  # reached: never
