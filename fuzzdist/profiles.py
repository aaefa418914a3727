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


def register() -> None:
    """(Re-)register fuzzdist's profiles with Hypothesis."""
    for name, profile in PROFILES.items():
        settings.register_profile(name, profile)


register()
