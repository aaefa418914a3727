"""The driver's first check of what the ranks returned: did any rank report a problem?"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fuzzdist.errors import PropertyFailure
from fuzzdist.problems import by_rank


def fail_on_reported_problems(results: Sequence[Mapping[str, Any]], claim: str, shown: Any = None) -> None:
    """Raise :class:`PropertyFailure` ``"<claim> on ranks [...]:"`` with each rank's ``"problems"``, where
    any rank reported one; ``shown`` (default: ``results``) is what the failure carries."""
    wrong = {rank: obs["problems"] for rank, obs in enumerate(results) if obs["problems"]}
    if wrong:
        raise PropertyFailure(f"{claim} on ranks {sorted(wrong)}:{by_rank(wrong)}", results if shown is None else shown)
