"""What a known torch bug is, and the registry holding them: a leaf module, so that the modules that register
bugs (each family's ``known_bugs``, listed in :mod:`fuzzdist.known_bugs.entries`) import it without importing
:mod:`fuzzdist.known_bugs`, which collects them (one-way import graph).

A bug of torch's that fuzzdist found has its metadata (summary, kind, upstream thread, reproducer, the
versions it reproduces on) written once, in the catalogue (:mod:`fuzzdist.known_bugs.catalogue`):
:func:`register` fills what an entry leaves out from there, and refuses an entry that says otherwise.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import catalogue
from fuzzdist.known_bugs.catalogue import KINDS

__all__ = ["KINDS", "Example", "KnownBug", "register"]

Example = Mapping[str, Any]

_ID = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")

DEFAULT_KIND = "wrong result"
"""The kind of an entry that names none and has no catalogue entry."""


@dataclass(frozen=True, kw_only=True)
class KnownBug:
    """One bug of torch's that a property or ``check-pg`` runs into.

    ``where`` names the checks whose failures it can explain (a property module's name such as
    ``"broadcast"``, or ``"check-pg:<collective>"``); ``recognise(example, failure)`` says whether
    this failure of that check, on this example, is this bug: it must look at the symptom (the
    failure's type and message), not only at the inputs, so that a different failure on the same
    inputs stays a failure.  ``seen_on`` lists the torch versions (``"2.13"``) it reproduced on,
    ``upstream`` the issue where torch tracks it, ``reproducer`` the standalone script (a path
    relative to the repository, ``docs/findings/<finding>/repro.py``).  ``kind`` is what sort of bug it
    is, one of :data:`KINDS`: ``"missing validation"`` marks an input torch's documentation forbids (the
    user's misuse) that torch accepts without an error; it is recognised like the others, but it is not
    a bug in what torch promises.

    For a bug in fuzzdist's catalogue, ``summary``, ``seen_on``, ``upstream``, ``reproducer`` and ``kind``
    may be left out: :func:`register` fills them from there.  Any other bug gives ``summary`` and
    ``seen_on`` itself (its ``kind`` is ``"wrong result"`` unless it says otherwise).
    """

    id: str
    summary: str = ""
    where: tuple[str, ...]
    recognise: Callable[[Example, BaseException], bool] = field(repr=False)
    seen_on: tuple[str, ...] = ()
    upstream: str | None = None
    reproducer: str | None = None
    kind: str = ""


_REGISTRY: dict[str, KnownBug] = {}


def register(bug: KnownBug) -> KnownBug:
    """Add ``bug`` to the registry (once per id), with its metadata filled from the catalogue, and return
    the entry as registered."""
    if not _ID.fullmatch(bug.id):
        raise InvalidArgument(
            f"known bug {bug.id!r} must be lower-case words joined by '-', such as 'gloo-broadcast-ignores-strides'"
        )
    if not bug.where:
        raise InvalidArgument(
            f"known bug {bug.id!r} names no check in where=; name the property module "
            "(e.g. 'broadcast') or 'check-pg:<collective>' whose failures it explains"
        )
    if bug.kind and bug.kind not in KINDS:
        raise InvalidArgument(f"known bug {bug.id!r} has kind={bug.kind!r}; give one of {', '.join(map(repr, KINDS))}")
    bug = _filled(bug)
    if bug.id in _REGISTRY and _identity(_REGISTRY[bug.id]) != _identity(bug):
        raise InvalidArgument(f"a known bug with id {bug.id!r} is already registered; give this one its own id")
    _REGISTRY[bug.id] = bug  # the same entry again (its module imported anew) replaces the old one
    return bug


def _filled(bug: KnownBug) -> KnownBug:
    """``bug`` with what it leaves out taken from its catalogue entry; refused where it contradicts it."""
    finding = catalogue.load().by_known_bug(bug.id)
    if finding is None:
        if not bug.summary or not bug.seen_on:
            raise InvalidArgument(
                f"known bug {bug.id!r} has no entry in fuzzdist's catalogue ({catalogue.PATH.name}): give its "
                "summary= and seen_on= (the torch versions it reproduced on, such as ('2.13',))"
            )
        return bug if bug.kind else dataclasses.replace(bug, kind=DEFAULT_KIND)
    where = f"fuzzdist/known_bugs/{catalogue.PATH.name}'s [findings.{finding.id}]"
    clashes = []
    for name, given, written in (
        ("summary", bug.summary, finding.summary),
        ("kind", bug.kind, finding.kind),
        ("upstream", bug.upstream, finding.upstream),
    ):
        if given and given != written:
            clashes.append(f"{name}={given!r} where the catalogue says {written!r}")
    if bug.seen_on and not set(bug.seen_on) <= set(finding.seen_on):
        clashes.append(f"seen_on={bug.seen_on!r} where the catalogue's matrix shows it on {finding.seen_on!r} only")
    if bug.reproducer and _finding_of(bug.reproducer) != finding.id:
        clashes.append(f"reproducer={bug.reproducer!r} where the catalogue's is {finding.reproducer!r}")
    if clashes:
        raise InvalidArgument(
            f"known bug {bug.id!r} contradicts {where}: {'; '.join(clashes)}. Leave those "
            "arguments out (the catalogue fills them), or correct the catalogue"
        )
    return dataclasses.replace(
        bug,
        summary=finding.summary,
        kind=finding.kind,
        upstream=finding.upstream,
        seen_on=finding.seen_on,
        reproducer=finding.reproducer,
    )


def _finding_of(reproducer: str) -> str:
    """The finding a reproducer path names: ``docs/findings/<id>/repro.py``, or the single-file form
    ``docs/findings/<id>.py`` that entries written before the findings had folders still give."""
    path = PurePosixPath(reproducer)
    return path.parent.name if path.parent.name != "findings" else path.stem


def _identity(bug: KnownBug) -> tuple[Any, ...]:
    """What makes two registrations the same entry: a module imported twice (pytest.main run twice in one
    process, a reload) registers new function objects, so the predicate counts by its module and name."""
    recognise = bug.recognise
    return (
        bug.id,
        bug.where,
        bug.summary,
        getattr(recognise, "__module__", None),
        getattr(recognise, "__qualname__", repr(recognise)),
    )
