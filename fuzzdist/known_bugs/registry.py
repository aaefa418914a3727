"""What a known torch bug is, and the registry holding them: a leaf module, so that the modules that register
bugs (each family's ``known_bugs``, listed in :mod:`fuzzdist.known_bugs.entries`) import it without importing
:mod:`fuzzdist.known_bugs`, which collects them (one-way import graph)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fuzzdist.errors import InvalidArgument

Example = Mapping[str, Any]

_ID = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")

KINDS = ("wrong result", "crash", "hang", "unclear error", "missing feature", "missing validation")
"""The kinds of known bug: torch computed a wrong value; raised or died where it documents a result; blocked
without end (or until a timeout) where it documents a result; refused a documented input with an error that
doesn't say what is wrong; lacks what its documentation offers; accepted, without a clear error, an input
its documentation forbids (a misuse, not a broken promise)."""


@dataclass(frozen=True)
class KnownBug:
    """One bug of torch's that a property or ``check-pg`` runs into.

    ``where`` names the checks whose failures it can explain (a property module's name such as
    ``"broadcast"``, or ``"check-pg:<collective>"``); ``recognise(example, failure)`` says whether
    this failure of that check, on this example, is this bug: it must look at the symptom (the
    failure's type and message), not only at the inputs, so that a different failure on the same
    inputs stays a failure.  ``seen_on`` lists the torch versions (``"2.13"``) it reproduced on,
    ``upstream`` the issue where torch tracks it, ``reproducer`` the standalone script (a path
    relative to the repository, under ``docs/findings/``).  ``kind`` is what sort of bug it is, one of
    :data:`KINDS`: ``"missing validation"`` marks an input torch's documentation forbids (the user's
    misuse) that torch accepts without an error; it is recognised like the others, but it is not a
    bug in what torch promises.
    """

    id: str
    summary: str
    where: tuple[str, ...]
    recognise: Callable[[Example, BaseException], bool] = field(repr=False)
    seen_on: tuple[str, ...]
    upstream: str | None = None
    reproducer: str | None = None
    kind: str = "wrong result"


_REGISTRY: dict[str, KnownBug] = {}


def register(bug: KnownBug) -> KnownBug:
    """Add ``bug`` to the registry (once per id) and return it."""
    if not _ID.fullmatch(bug.id):
        raise InvalidArgument(f"known bug id {bug.id!r} must be lower-case words joined by '-', "
                              "such as 'gloo-broadcast-ignores-strides'")
    if not bug.where:
        raise InvalidArgument(f"known bug {bug.id!r} names no check in where=; name the property module "
                              "(e.g. 'broadcast') or 'check-pg:<collective>' whose failures it explains")
    if bug.kind not in KINDS:
        raise InvalidArgument(f"known bug {bug.id!r} has kind={bug.kind!r}; give one of {', '.join(map(repr, KINDS))}")
    if bug.id in _REGISTRY and _identity(_REGISTRY[bug.id]) != _identity(bug):
        raise InvalidArgument(f"a known bug with id {bug.id!r} is already registered; give this one its own id")
    _REGISTRY[bug.id] = bug  # the same entry again (its module imported anew) replaces the old one
    return bug


def _identity(bug: KnownBug) -> tuple:
    """What makes two registrations the same entry: a module imported twice (pytest.main run twice in one
    process, a reload) registers new function objects, so the predicate counts by its module and name."""
    recognise = bug.recognise
    return (bug.id, bug.where, bug.summary, getattr(recognise, "__module__", None),
            getattr(recognise, "__qualname__", repr(recognise)))
