"""Known torch bugs, as data.

A property that runs into a bug of torch's own keeps drawing the inputs that trigger it: leaving
them out of the strategies would hide exactly what fuzzdist exists to show, and nobody would notice
when torch fixes the bug or when a new one appears next to it.  Instead each bug is a
:class:`KnownBug` here, with a predicate that recognises it from the example and the failure, and
the property runs its check inside :func:`known_failures`:

* a failure the predicate recognises is a *sighting*: it is tallied (and given to Hypothesis as an
  ``event``), not raised, so the search goes on for failures that are new.  The pytest plugin
  reports a test whose only failures were sightings as KNOWN, not as passed and not as failed;
  ``fuzzdist run`` and ``fuzzdist check-pg`` count them in their reports;
* a failure of the same property with a different symptom is not recognised and stays a failure;
* with no tally collecting (a check called outside pytest or a campaign), a recognised failure is
  raised as it is, with a note naming the known bug: nothing is ever swallowed silently.

Whether a known bug still reproduces on the installed torch is checked by running its pinned minimal
example with :func:`reproduces` (``properties/test_known_torch_bugs.py``); its standalone reproducer, with
torch alone, is the script named by :attr:`KnownBug.reproducer` (``docs/findings/``).

Modules: ``registry.py`` (what a known bug is, and the registry), ``entries.py`` (the one list of the
modules that register entries: each family's ``known_bugs.py``, imported by name on first use),
``evidence.py`` (a failure as the records predicates read), ``predicates.py`` (what predicates share),
``catalogue.py`` (the catalogue of findings, ``catalogue.toml``: each finding's metadata, once),
``catalogue_pages.py`` (the findings pages generated from the catalogue).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fuzzdist.errors import InvalidArgument, InvalidState
from fuzzdist.known_bugs import entries
from fuzzdist.known_bugs.registry import _REGISTRY, KINDS, Example, KnownBug, register

__all__ = [
    "KINDS",
    "KnownBug",
    "Sighting",
    "Tally",
    "collecting",
    "current_tally",
    "fixed_message",
    "known_failures",
    "not_collecting",
    "recognise",
    "register",
    "registry",
    "reproduces",
    "sighted",
]


def registry() -> Mapping[str, KnownBug]:
    """Every registered known bug by id (the built-in ones: every family's, collected on first use)."""
    entries.load()
    return dict(_REGISTRY)


def recognise(where: str, example: Example, failure: BaseException) -> KnownBug | None:
    """The known bug that explains ``failure`` of check ``where`` on ``example``, or None."""
    entries.load(where)
    for bug in _REGISTRY.values():
        if where in bug.where:
            try:
                if bug.recognise(example, failure):
                    return bug
            except Exception as exc:  # a broken predicate must not turn a failure into a pass
                raise InvalidState(
                    f"the predicate of known bug {bug.id!r} raised {exc!r} on "
                    f"{type(failure).__name__}; fix it in {getattr(bug.recognise, '__module__', '')}"
                ) from exc
    return None


@dataclass
class Sighting:
    """How often one known bug was seen in one test, and the first example that showed it."""

    bug: KnownBug
    count: int
    example: str
    failure: str


@dataclass
class Tally:
    """The sightings of one test (or one check-pg collective), by bug id, in the order first seen."""

    sightings: dict[str, Sighting] = field(default_factory=dict)

    def add(self, bug: KnownBug, example: Example, failure: BaseException) -> None:
        seen = self.sightings.get(bug.id)
        if seen is None:
            example_text = ", ".join(f"{k}={v!r}" for k, v in example.items())
            first_line = (str(failure).strip().splitlines() or [""])[0]
            self.sightings[bug.id] = Sighting(bug, 1, example_text, f"{type(failure).__name__}: {first_line}"[:300])
        else:
            seen.count += 1

    def __bool__(self) -> bool:
        return bool(self.sightings)

    @property
    def total(self) -> int:
        """Sightings of every bug together."""
        return sum(s.count for s in self.sightings.values())

    def lines(self) -> list[str]:
        """One line per bug: id, count, kind, summary, upstream; then the first example that showed it."""
        out = []
        for s in self.sightings.values():
            upstream = f" ({s.bug.upstream})" if s.bug.upstream else ""
            out.append(f"KNOWN {s.bug.id} x{s.count} [{s.bug.kind}]: {s.bug.summary}{upstream}")
            out.append(f"    first seen on: {s.example}")
            out.append(f"    failure: {s.failure}")
        return out

    def as_json(self) -> list[dict[str, Any]]:
        return [
            {
                "id": s.bug.id,
                "count": s.count,
                "kind": s.bug.kind,
                "summary": s.bug.summary,
                "upstream": s.bug.upstream,
                "reproducer": s.bug.reproducer,
                "example": s.example,
                "failure": s.failure,
            }
            for s in self.sightings.values()
        ]


_collecting: list[Tally] = []


@contextlib.contextmanager
def collecting() -> Iterator[Tally]:
    """Tally the sightings of the checks run inside; the pytest plugin wraps every test in one."""
    tally = Tally()
    _collecting.append(tally)
    try:
        yield tally
    finally:
        _collecting.remove(tally)


@contextlib.contextmanager
def not_collecting() -> Iterator[None]:
    """Run checks as outside every :func:`collecting` block: a recognised failure is raised, with a
    note naming the bug (:func:`reproduces` runs a pinned example so)."""
    outer = _collecting[:]
    _collecting.clear()
    try:
        yield
    finally:
        _collecting[:] = outer


def current_tally() -> Tally | None:
    """The tally the innermost :func:`collecting` block fills, or None outside one."""
    return _collecting[-1] if _collecting else None


def sighted(where: str, example: Example, failure: BaseException) -> bool:
    """Whether ``failure`` of check ``where`` on ``example`` is a known bug, tallied as a sighting.

    True: it was tallied into the current tally (the caller drops the failure).  False: either no
    known bug explains it, or none is collecting (then a recognised failure gets a note naming the
    bug, and the caller raises it as it is).  For callers that can't wrap the check in
    :func:`known_failures`, such as ``check-pg``, which builds its failure messages itself."""
    bug = recognise(where, example, failure)
    if bug is None:
        return False
    if not _collecting:
        # add_note() is 3.11+; __notes__ is what it writes and what 3.10's exceptiongroup backport prints
        notes = [*getattr(failure, "__notes__", []), f"fuzzdist: this is known torch bug {bug.id!r}: {bug.summary}"]
        setattr(failure, "__notes__", notes)  # noqa: B010  (mypy's 3.10 target has no __notes__)
        return False
    _collecting[-1].add(bug, example, failure)
    _event(f"known torch bug: {bug.id}")
    return True


@contextlib.contextmanager
def known_failures(where: str, **example: Any) -> Iterator[None]:
    """Run one check of ``where`` on ``example``; a failure it raises that a known bug explains is
    tallied as a sighting instead of raised (see the module docstring).  Anything else propagates."""
    try:
        yield
    except Exception as failure:
        if not sighted(where, example, failure):
            raise


def reproduces(bug_id: str, where: str, example: Example, check: Callable[[], object]) -> bool:
    """Run ``check`` (the pinned minimal example of ``bug_id``): True if it fails and ``bug_id`` explains
    the failure (tallied as a sighting when a tally is collecting, so pytest reports the test KNOWN),
    False if it passes (torch fixed it: fail with :func:`fixed_message`); a failure that is not this
    bug propagates."""
    bugs = registry()
    if bug_id not in bugs:
        raise InvalidArgument(f"no known bug {bug_id!r}; registered: {sorted(bugs)}")
    outer = current_tally()
    try:
        with not_collecting():  # the check's own known_failures() must raise the failure, not tally it
            check()
    except Exception as failure:
        if recognise(where, example, failure) is bugs[bug_id]:
            if outer is not None:
                outer.add(bugs[bug_id], example, failure)
            return True
        raise
    return False


def fixed_message(bug_id: str) -> str:
    """What to say when ``bug_id``'s pinned example no longer fails: torch fixed it."""
    import torch

    version = torch.__version__.split("+")[0]
    return (
        f"known bug {bug_id} no longer reproduces on torch {version}: torch fixed it; narrow seen_on / drop the entry"
    )


def _event(text: str) -> None:
    try:
        from hypothesis import event

        event(text)
    except Exception:  # noqa: BLE001 - hypothesis.errors.InvalidArgument outside a test: nothing to record into
        pass
