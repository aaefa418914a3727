"""What the ranks print, kept per example instead of sprayed over the terminal.

A spawned rank sends its stdout and stderr (file descriptors 1 and 2: Python's
``print`` and ``warnings``, and what C++ writes, such as torch's
``[W reducer.cpp ...]`` lines) to a file of its own (:func:`install`), and
records the Python warnings of each example as data (:func:`example`).  The
reply to the example carries what was written during it (a
:class:`RankOutput`, or None when nothing was: the common case costs a
``fstat``).

The driver shows a rank's output with a failure, where it may be the clue,
and otherwise hands it to the :class:`OutputLog` of the running test, which
pytest's terminal summary prints once per property (the way pytest
summarises warnings).  ``RankPool(rank_output="live")`` (pytest:
``--fuzzdist-rank-output=live``) leaves the ranks' output alone, for
debugging.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

MAX_TEXT = 20_000  # characters of one example's text output kept per rank; the rest is cut
OUTPUT_MODES = ("capture", "live")


@dataclass(frozen=True)
class RankOutput:
    """What one rank wrote during one example: its Python warnings and its other output (text)."""

    warnings: tuple[tuple[str, str, str], ...] = ()  # (category name, message, "file:line")
    text: str = ""

    def format(self) -> str:
        """The warnings, one per line, then the text."""
        lines = [f"{category}: {message} ({where})" for category, message, where in self.warnings]
        if self.text:
            lines.append(self.text.rstrip())
        return "\n".join(lines)


# -- the rank's side -----------------------------------------------------------------


class _Capture:
    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self.offset = 0


_capture: _Capture | None = None


def install(path: str) -> None:
    """Send this process's stdout and stderr to ``path`` (called first thing in a spawned rank)."""
    global _capture
    sys.stdout.flush()
    sys.stderr.flush()
    capture = _Capture(path)
    os.dup2(capture.fd, 1)
    os.dup2(capture.fd, 2)
    _capture = capture


def _written_since(capture: _Capture) -> str:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    size = os.fstat(capture.fd).st_size
    if size <= capture.offset:
        return ""
    data = os.pread(capture.fd, min(size - capture.offset, MAX_TEXT * 4), capture.offset)
    capture.offset = size
    text = data.decode(errors="replace")
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f"\n... ({len(text) - MAX_TEXT} more characters cut)"
    return text


class _Example:
    """The context manager :func:`example` returns (a class, not a generator: entered every example)."""

    __slots__ = ("output", "_capture", "_warnings", "_caught")

    def __init__(self) -> None:
        self.output: RankOutput | None = None
        # Only the example's thread records: rank 0 under torchrun runs its share in a thread of the
        # driver, whose own warnings must stay where they are (it is never captured there anyway).
        capture = _capture
        if capture is not None and threading.current_thread() is not threading.main_thread():
            capture = None
        self._capture = capture
        self._warnings: warnings.catch_warnings | None = None
        self._caught: list[warnings.WarningMessage] = []

    def __enter__(self) -> _Example:
        if self._capture is not None:
            _written_since(self._capture)  # what came between examples is not this example's
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._capture is None or self._warnings is None:
            return
        self._warnings.__exit__(None, None, None)
        text = _written_since(self._capture)
        caught = self._caught
        recorded = tuple((w.category.__name__, str(w.message), f"{w.filename}:{w.lineno}") for w in caught)
        if text or recorded:
            self.output = RankOutput(recorded, text)


def example() -> _Example:
    """Record what the example writes; ``.output`` is set on exit (None if nothing, or not captured)."""
    return _Example()


def tail(path: str, limit: int = 4000) -> str:
    """The end of a rank's output file (a crashed rank's last words), or ''."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


# -- the driver's side ------------------------------------------------------------------


@dataclass
class _Seen:
    examples: int = 0
    ranks: set[int] = field(default_factory=set)
    first: str = ""  # the full text of its first occurrence


class OutputLog:
    """The rank output of the examples that passed, per test, by distinct warning or first text line."""

    def __init__(self) -> None:
        self.tests: dict[str, dict[str, _Seen]] = {}
        self._current: str | None = None

    @contextlib.contextmanager
    def collecting(self, test: str) -> Iterator[None]:
        """Attribute what the ranks print meanwhile to ``test`` (a node id)."""
        previous, self._current = self._current, test
        token = _set_log(self)
        try:
            yield
        finally:
            self._current = previous
            _set_log(token)

    def add(self, outputs: Mapping[int, RankOutput]) -> None:
        """File one example's outputs by rank."""
        if self._current is None:
            return
        seen_here: dict[str, set[int]] = {}
        for rank, output in outputs.items():
            for category, message, where in output.warnings:
                key = f"{category}: {message.splitlines()[0] if message else ''} ({where})"
                seen_here.setdefault(key, set()).add(rank)
                self._first(key, f"{category}: {message} ({where})")
            for line in output.text.splitlines():
                if line.strip():
                    key = f"output: {line.strip()[:200]}"
                    seen_here.setdefault(key, set()).add(rank)
                    self._first(key, output.text)
                    break  # one entry per example's text, by its first line
        test = self.tests.setdefault(self._current, {})
        for key, ranks in seen_here.items():
            entry = test.setdefault(key, _Seen())
            entry.examples += 1
            entry.ranks |= ranks

    def _first(self, key: str, text: str) -> None:
        assert self._current is not None
        entry = self.tests.setdefault(self._current, {}).setdefault(key, _Seen())
        if not entry.first:
            entry.first = text

    def entries(self, test: str) -> list[dict[str, object]]:
        """``test``'s distinct outputs as plain values (for JSON reports), most frequent first."""
        return [
            {"what": key, "examples": seen.examples, "ranks": sorted(seen.ranks), "first": seen.first}
            for key, seen in sorted(self.tests.get(test, {}).items(), key=lambda kv: -kv[1].examples)
        ]

    def summary(self) -> list[str]:
        """Lines for the end of the run: per test, each distinct output with its count and ranks."""
        lines = []
        for test, entries in self.tests.items():
            lines.append(test)
            for key, seen in sorted(entries.items(), key=lambda kv: -kv[1].examples):
                examples = f"{seen.examples} example{'s' * (seen.examples != 1)}"
                ranks = f"rank{'s' * (len(seen.ranks) != 1)} {', '.join(map(str, sorted(seen.ranks)))}"
                lines.append(f"  {examples}, {ranks}: {key}")
        return lines


_log: OutputLog | None = None


def _set_log(log: OutputLog | None) -> OutputLog | None:
    global _log
    previous, _log = _log, log
    return previous


def report(outputs: Mapping[int, RankOutput]) -> None:
    """Hand the outputs of an example that passed to the test collecting them, if any."""
    if _log is not None and outputs:
        _log.add(outputs)


def validate_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`OUTPUT_MODES`; else an error that lists them."""
    from fuzzdist.errors import InvalidArgument

    if mode not in OUTPUT_MODES:
        raise InvalidArgument(
            f"rank_output must be one of {', '.join(map(repr, OUTPUT_MODES))}, got {mode!r}: "
            "'capture' keeps each example's output and shows it with failures, 'live' lets "
            "the ranks print as they go"
        )
    return mode
