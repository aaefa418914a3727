"""The driver's first check of what the ranks returned: did any rank report a problem?  Two shapes of result:
each rank's observations with their ``"problems"`` (:func:`fail_on_reported_problems`), or each rank's list of
problems itself, None where all was well (:func:`fail_on_ranks_with_problems`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fuzzdist.errors import PropertyFailure
from fuzzdist.problems import Problem, by_rank


def fail_on_reported_problems(results: Sequence[Mapping[str, Any]], claim: str, shown: Any = None) -> None:
    """Raise :class:`PropertyFailure` ``"<claim> on ranks [...]:"`` with each rank's ``"problems"``, where
    any rank reported one; ``shown`` (default: ``results``) is what the failure carries."""
    wrong = {rank: obs["problems"] for rank, obs in enumerate(results) if obs["problems"]}
    if wrong:
        raise PropertyFailure(f"{claim} on ranks {sorted(wrong)}:{by_rank(wrong)}", results if shown is None else shown)


def fail_on_ranks_with_problems(results: Sequence[Sequence[Problem] | None], claim: str) -> None:
    """Raise :class:`PropertyFailure` ``"ranks [...] <claim>:"`` with each rank's problems, where any rank
    returned some (``results``: one list of problems per rank, None or empty where all was well; the failure
    carries it)."""
    wrong = {rank: problems for rank, problems in enumerate(results) if problems}
    if wrong:
        raise PropertyFailure(f"ranks {sorted(wrong)} {claim}:{by_rank(wrong)}", results)
