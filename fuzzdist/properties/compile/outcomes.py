"""The driver's reading of what the family's ranks return: the graph breaks they met, as Hypothesis events (a
graph break is not a failure), and their problems, as a :class:`PropertyFailure`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from hypothesis import currently_in_test_context, event

from fuzzdist.problems import Problem, by_rank
from fuzzdist.properties import PropertyFailure


class RankOutcome(Protocol):
    """What a rank of any of the family's properties returns: its problems and the graph breaks compiling met."""

    @property
    def problems(self) -> Sequence[Problem]: ...

    @property
    def breaks(self) -> Sequence[str]: ...


def report_graph_breaks(outcomes: Sequence[RankOutcome], label: str) -> None:
    """One Hypothesis event ``"<label>: graph break: <reason>"`` per distinct reason any rank met (its first
    line, cut at 120 characters); outside a Hypothesis test, as when ``check`` is called directly, nothing."""
    if not currently_in_test_context():
        return
    for reason in sorted({r for o in outcomes for r in o.breaks}):
        event(f"{label}: graph break: {reason.splitlines()[0][:120]}")


def fail_on_rank_problems(outcomes: Sequence[RankOutcome], claim: str) -> None:
    """Raise :class:`PropertyFailure` ``"<claim> on ranks [...]:"`` with each rank's problems, where any rank
    has one; the failure carries every rank's problems (None for a rank without)."""
    wrong = {rank: list(o.problems) for rank, o in enumerate(outcomes) if o.problems}
    if wrong:
        raise PropertyFailure(
            f"{claim} on ranks {sorted(wrong)}:{by_rank(wrong)}",
            [list(o.problems) or None for o in outcomes],
        )
