"""What the HTML report plots: a property's counts over time, and which event() values met in one example.

Both are kept small enough to go into the JSON report of a night-long campaign:
a :class:`TimeSeries` holds at most ``max_points`` samples (it halves itself and
doubles its interval when full, so the samples stay evenly spread over the whole
run), and :class:`EventPairs` holds at most ``max_cells`` pair counts.
"""

from __future__ import annotations

import itertools
from collections import Counter

from fuzzdist.errors import InvalidArgument

SERIES_INTERVAL_S = 1.0  # the first sampling interval: a sample a second, until the series is full
SERIES_MAX_POINTS = 200  # samples kept per property (the latest one comes on top)
SERIES_COLUMNS = ("t_s", "examples", "invalid_examples", "distinct_failures")
MAX_PAIR_CELLS = 5000  # (value, value) counts kept per property; past it new pairs are counted as dropped


class TimeSeries:
    """Samples ``(t, *values)`` no closer than ``interval`` seconds, at most ``max_points`` of them.

    When full, every other sample is dropped (the first is kept) and the interval
    doubles: a long run keeps ``max_points / 2`` to ``max_points`` samples spread
    evenly over all of it.  The latest sample offered is always kept as well, so
    the series ends at the property's current counts.
    """

    def __init__(self, interval: float = SERIES_INTERVAL_S, max_points: int = SERIES_MAX_POINTS) -> None:
        if max_points < 2 or not interval > 0:
            raise InvalidArgument(f"a time series needs max_points >= 2 and interval > 0, got {max_points}, {interval}")
        self.interval = interval
        self.max_points = max_points
        self.points: list[tuple[float, ...]] = []
        self.latest: tuple[float, ...] | None = None  # the last sample offered, when not in points

    def add(self, t: float, *values: float) -> None:
        """Offer a sample at time ``t`` (non-decreasing from call to call)."""
        point = (t, *values)
        if self.points and t - self.points[-1][0] < self.interval:
            self.latest = point
            return
        self.points.append(point)
        self.latest = None
        if len(self.points) > self.max_points:
            self.points = self.points[::2]
            self.interval *= 2
            if self.points[-1] is not point:  # dropped from the kept samples, still the latest
                self.latest = point

    def samples(self) -> list[tuple[float, ...]]:
        """The samples kept, the latest offered last; at most ``max_points + 1``."""
        return self.points + ([self.latest] if self.latest is not None else [])

    def to_dict(self, columns: tuple[str, ...] = SERIES_COLUMNS) -> dict:
        """Columns of equal length (one list per column) and the interval now in force."""
        samples = self.samples()
        return {
            "interval_s": self.interval,
            **{
                name: [round(s[i], 3) if isinstance(s[i], float) else s[i] for s in samples]
                for i, name in enumerate(columns)
            },
        }


def split_event(label: str, value: object = "") -> tuple[str, str] | None:
    """``("dtype", "float32")`` for ``event("dtype=float32")`` or ``event("dtype", "float32")``;
    None for a label that names no value (``event("known torch bug: X")``)."""
    if value != "":
        return label, str(value)
    key, sep, val = label.partition("=")
    return (key, val) if sep and key else None


class EventPairs:
    """How many examples reached each pair of ``key=value`` event values together (dtype=float32 with
    layout=transposed), for every pair of keys; the page draws a grid per pair of keys."""

    def __init__(self, max_cells: int = MAX_PAIR_CELLS) -> None:
        self.max_cells = max_cells
        self.counts: dict[tuple[str, str], Counter] = {}
        self.cells = 0
        self.dropped = 0  # example-pairs not counted because the cells were full

    def add_example(self, values: dict[str, set[str]]) -> None:
        """Count one example's event values (key -> the values it reached)."""
        for a, b in itertools.combinations(sorted(values), 2):
            grid = self.counts.get((a, b))
            for va in values[a]:
                for vb in values[b]:
                    if grid is not None and (va, vb) in grid:
                        grid[(va, vb)] += 1
                    elif self.cells < self.max_cells:
                        if grid is None:
                            grid = self.counts[(a, b)] = Counter()
                        grid[(va, vb)] += 1
                        self.cells += 1
                    else:
                        self.dropped += 1

    def to_list(self) -> list[dict]:
        """``[{"x": "dtype", "y": "layout", "cells": [["float32", "transposed", 12], ...]}, ...]``."""
        return [
            {"x": a, "y": b, "cells": [[va, vb, n] for (va, vb), n in sorted(grid.items())]}
            for (a, b), grid in sorted(self.counts.items())
        ]
