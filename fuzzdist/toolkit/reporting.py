"""How many problems a rank reports: the first :data:`MAX_REPORTED`, then one record for the rest."""

from __future__ import annotations

from collections.abc import Sequence

from fuzzdist.problems import Kind, Problem

MAX_REPORTED = 8
"""Problems a rank reports per example; more would bury the first, which is usually the cause."""


def capped(problems: Sequence[Problem], limit: int = MAX_REPORTED) -> list[Problem]:
    """The first ``limit`` of ``problems``, then a :attr:`~fuzzdist.problems.Kind.MORE` record counting
    the rest.  Where every problem shows one symptom, the record shows it too: the whole report is then
    still that symptom."""
    if len(problems) <= limit:
        return list(problems)
    symptoms = {p.symptom for p in problems}
    shared = symptoms.pop() if len(symptoms) == 1 else None
    return [*problems[:limit], Problem(Kind.MORE, count=len(problems) - limit, symptom=shared)]
