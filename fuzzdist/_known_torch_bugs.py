"""The torch bugs fuzzdist's properties and ``check-pg`` have run into (see :mod:`fuzzdist.known_bugs`).

One :func:`~fuzzdist.known_bugs.register` call per bug, each with its standalone reproducer in
``docs/findings/`` and its entry in ``docs/findings.md``.  A predicate looks at the symptom, not only
at the inputs: a different failure on the same inputs must stay a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs import KnownBug, register  # noqa: F401  (used by the entries below)

# Entries are added below, one register(KnownBug(...)) per bug.


def _functional_all_to_all_complex(example: Mapping[str, Any], failure: BaseException) -> bool:
    case = example.get("case")
    calls = getattr(case, "calls", ())
    return ("Invalid scalar type" in str(failure)
            and any(c.op == "all_to_all_single" and c.spec.dtype.is_complex for c in calls))


register(KnownBug(
    id="gloo-functional-all-to-all-complex-raises",
    summary="functional all_to_all_single raises 'Invalid scalar type' for complex tensors on gloo "
            "(dist.all_to_all_single works: it views them as real)",
    where=("functional",),
    recognise=_functional_all_to_all_complex,
    seen_on=("2.13",),
    reproducer="docs/findings/gloo-functional-all-to-all-complex-raises.py",
))
