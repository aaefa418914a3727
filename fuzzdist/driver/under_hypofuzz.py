"""fuzzdist properties under HypoFuzz (``hypothesis fuzz``), which calls each test's ``inner_test`` itself.

HypoFuzz collects the tests with pytest and sets up their fixtures (a property's ``rank_pool`` too),
but then runs the examples without pytest's ``pytest_runtest_call``, where the fuzzdist plugin
tallies known torch bugs.  Without the tally a sighting of a known bug is raised as the property's
failure (a broadcast of a transposed tensor fails at once).  :func:`prepare` wraps each property's
``inner_test`` before HypoFuzz takes it, so each example runs as under pytest: a known bug's
sighting passes (and is an ``event()``, which HypoFuzz counts as a behaviour), a property failure is
tagged for observability, a missing capability skips.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from fuzzdist import known_bugs

_WRAPPED = "_fuzzdist_under_hypofuzz"  # marks an inner_test already wrapped (variants share one function)


def running() -> bool:
    """Whether this process is HypoFuzz's (``hypothesis fuzz``), without importing HypoFuzz."""
    detection = sys.modules.get("hypofuzz.detection")
    return bool(detection is not None and detection.in_hypofuzz_run())


def prepare(items: Iterable[pytest.Item], tag: Callable[[Callable[..., Any]], Callable[..., Any]]) -> int:
    """Wrap the ``inner_test`` of each Hypothesis test among ``items`` so that its examples tally known
    bugs, with ``tag`` (the plugin's failure tagging) inside; the number of tests wrapped."""
    wrapped = 0
    for item in items:
        handle: Any = getattr(getattr(item, "obj", None), "hypothesis", None)
        inner = getattr(handle, "inner_test", None)
        if inner is None or getattr(inner, _WRAPPED, False):
            continue
        handle.inner_test = _tallying(tag(inner))
        wrapped += 1
    return wrapped


def _tallying(inner: Callable[..., Any]) -> Callable[..., Any]:
    """``inner`` run inside a known-bug tally of its own, per example.  ``functools.wraps`` keeps the
    database key Hypothesis and HypoFuzz derive from the wrapped function."""

    @functools.wraps(inner)
    def example(*args: Any, **kwargs: Any) -> Any:
        with known_bugs.collecting():
            return inner(*args, **kwargs)

    setattr(example, _WRAPPED, True)
    return example
