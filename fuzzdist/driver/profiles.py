"""The Hypothesis profiles fuzzdist registers.

Load one with ``pytest --hypothesis-profile=NAME`` or
``settings.load_profile(NAME)``.  The deadline is off in all of them: an
example's deadline is the rank pool's timeout, which also catches hangs.

    ci        small and fast: 20 examples, for every push.
    dev       100 examples: the everyday local run (the plugin's default).
    campaign  long fuzzing: 100,000 examples per property, no shrink limit.
    replay    only the explicit @example()s and the examples saved in the
              database: re-run what was found, generate nothing new.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, Verbosity, settings

# Rank examples are slower than Hypothesis's defaults assume.
_SUPPRESSED = [HealthCheck.too_slow]

# Built on Hypothesis's "default" profile, never on whatever is loaded now: on a CI
# machine Hypothesis loads its own "ci" profile at import (no database,
# derandomized), and inheriting that would lose every failure CI finds.
_BASE = settings.get_profile("default")

PROFILES = {
    "ci": settings(_BASE, max_examples=20, deadline=None, print_blob=True, suppress_health_check=_SUPPRESSED),
    "dev": settings(_BASE, max_examples=100, deadline=None, print_blob=True, suppress_health_check=_SUPPRESSED),
    "campaign": settings(
        _BASE,
        max_examples=100_000,
        deadline=None,
        print_blob=True,
        suppress_health_check=_SUPPRESSED,
        verbosity=Verbosity.normal,
    ),
    "replay": settings(
        _BASE,
        phases=[Phase.explicit, Phase.reuse],
        deadline=None,
        print_blob=True,
        suppress_health_check=_SUPPRESSED,
    ),
}


def timeout_backstop(timeout: float, max_examples: int) -> float:
    """pytest-timeout's per-test timeout for a test that runs ``max_examples`` examples, where
    ``timeout`` is the one configured (pyproject.toml's ``timeout = 900``).

    The configured timeout is a backstop sized for the everyday profiles (``dev``'s 100 examples per
    test, or fewer); the pool's per-example timeout is the real bound on each example.  A profile that
    runs more examples gets a backstop that grows with them, so it allows the same average time per
    example as under ``dev``: ``campaign``'s 100,000 examples get 1000 x 900 s (about 10 days), which a
    run is not cut off by, while a driver stuck outside any example is still stopped in the end.
    Profiles with up to 100 examples (``ci``, ``dev``, ``replay``) keep the configured timeout.
    """
    return timeout * max(1.0, max_examples / PROFILES["dev"].max_examples)


def register() -> None:
    """(Re-)register fuzzdist's profiles with Hypothesis."""
    for name, profile in PROFILES.items():
        settings.register_profile(name, profile)


register()
