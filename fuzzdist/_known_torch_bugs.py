"""The torch bugs fuzzdist's properties and ``check-pg`` have run into (see :mod:`fuzzdist.known_bugs`).

One :func:`~fuzzdist.known_bugs.register` call per bug, each with its standalone reproducer in
``docs/findings/`` and its entry in ``docs/findings.md``.  A predicate looks at the symptom, not only
at the inputs: a different failure on the same inputs must stay a failure.
"""

from __future__ import annotations

from fuzzdist.known_bugs import KnownBug, register  # noqa: F401  (used by the entries below)

# Entries are added below, one register(KnownBug(...)) per bug.
