"""The live progress display: a rich Live table on a terminal, periodic plain lines otherwise.

Both show strings from outside (property names, ``event()`` labels, failure messages, the database's
name) as plain text: control characters escaped (:func:`~fuzzdist.campaign.plain_text.one_line`),
and in the rich table never read as markup (each is a ``Text``).

Both are driven from the main thread (the runner calls :meth:`Progress.update` at
most a few times a second, from inside the examples), so they never read
the campaign state while it changes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.live import Live

from fuzzdist.campaign.plain_text import one_line
from fuzzdist.campaign.report import CampaignState, PropertyState, fmt_events, fmt_left, fmt_seconds


class Progress:
    """No display (the base class)."""

    min_interval = 0.25

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._next = 0.0

    def start(self, state: CampaignState) -> None:
        pass

    def update(self, state: CampaignState, force: bool = False) -> None:
        now = time.monotonic()
        if force or now >= self._next:
            self._next = now + self.min_interval
            self.render(state)

    def render(self, state: CampaignState) -> None:
        pass

    def new_failure(self, state: CampaignState, prop: PropertyState, summary: str, known: bool) -> None:
        pass

    def property_done(self, state: CampaignState, prop: PropertyState) -> None:
        pass

    def visit_done(self, state: CampaignState, prop: PropertyState, kind: str, seconds: float, found: int) -> None:
        """One visit of the adaptive schedule ended and the property may get more (``kind``: "floor"
        or "adaptive"; ``seconds`` charged to it; ``found``: new behaviours reached in it)."""

    def note(self, state: CampaignState, text: str) -> None:
        """Something the user should know once (e.g. examples adopted from another database key)."""

    def stop(self, state: CampaignState) -> None:
        pass


class PlainProgress(Progress):
    """A line per running property every ``interval`` seconds, and a line per event."""

    def __init__(self, stream: TextIO, interval: float = 10.0) -> None:
        super().__init__(stream)
        self.min_interval = interval
        self._next = time.monotonic() + interval

    def _line(self, state: CampaignState, text: str) -> None:
        # A failure's message may hold drawn values (replayed from a shared database, too): plain text.
        self.stream.write(f"[{fmt_seconds(state.elapsed()):>6}] {one_line(text)}\n")
        self.stream.flush()

    def start(self, state: CampaignState) -> None:
        budget = []
        if state.duration_s is not None:
            budget.append(f"{fmt_seconds(state.duration_s)}")
        if state.max_examples is not None:
            budget.append(f"{state.max_examples:,} examples per property")
        self._line(
            state,
            f"fuzzdist campaign: {len(state.properties)} properties, budget "
            f"{' or '.join(budget) or 'the campaign profile'}, database {state.database}",
        )

    def render(self, state: CampaignState) -> None:
        for prop in state.properties.values():
            if prop.status == "running":
                self._line(state, _status_line(prop))

    def new_failure(self, state, prop, summary, known):
        what = "failure replayed from the database" if known else "new failure"
        self._line(state, f"{what} in {prop.nodeid}: {summary}")

    def property_done(self, state, prop):
        self._line(
            state,
            f"done {_status_line(prop)} [{prop.status}"
            + (f": {prop.stop_reason or prop.reason}]" if (prop.stop_reason or prop.reason) else "]"),
        )

    def visit_done(self, state, prop, kind, seconds, found):
        # What a visit achieved: a line at its start would say "0 examples" under the adaptive schedule
        # (most visits are shorter than the interval), so the plain log speaks at its end.
        self._line(state, f"{_counts(prop)}; {kind} visit of {fmt_seconds(seconds)}, {found} new behaviour(s)")

    def note(self, state, text):
        self._line(state, text)


def _counts(prop: PropertyState) -> str:
    return (
        f"{prop.nodeid}: {prop.examples:,} examples, {prop.examples_per_s:.1f}/s, "
        f"{len(prop.failures)} failure(s), {prop.known_count} known"
    )


def _status_line(prop: PropertyState) -> str:
    line = f"{_counts(prop)}, left {fmt_left(prop)}"
    events = fmt_events(prop.events)
    return line + (f"; events: {events}" if events else "")


class RichProgress(Progress):
    """A rich Live table, redrawn in place."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        from rich.console import Console

        self.console = Console(file=stream, force_terminal=True)
        self.live: Live | None = None
        self._log: list[str] = []

    def start(self, state: CampaignState) -> None:
        from rich.live import Live

        live = Live(
            self._table(state),
            console=self.console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        live.start()
        self.live = live

    def render(self, state: CampaignState) -> None:
        if self.live is not None:
            self.live.update(self._table(state), refresh=True)

    def new_failure(self, state, prop, summary, known):
        what = "failure replayed from the database" if known else "new failure"
        self._log.append(f"[{fmt_seconds(state.elapsed())}] {what} in {prop.nodeid}: {summary}")
        self.update(state, force=True)

    def property_done(self, state, prop):
        self.update(state, force=True)

    def note(self, state, text):
        from rich.text import Text

        self.console.print(Text(f"[{fmt_seconds(state.elapsed())}] {one_line(text)}"), highlight=False)

    def stop(self, state: CampaignState) -> None:
        if self.live is not None:
            self.live.update(self._table(state), refresh=True)
            self.live.stop()
            self.live = None

    def _table(self, state: CampaignState):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        left = state.time_left()
        title = (
            f"fuzzdist campaign - {fmt_seconds(state.elapsed())} elapsed"
            + (f", {fmt_seconds(left)} left" if left is not None else "")
            + f" - database {state.database}"
        )
        table = Table(title=Text(one_line(title), style="italic"), title_justify="left", expand=False)
        table.add_column("property", overflow="fold")
        table.add_column("status")
        table.add_column("examples", justify="right")
        table.add_column("ex/s", justify="right")
        table.add_column("failures", justify="right")
        table.add_column("known", justify="right")
        table.add_column("left", justify="right")
        table.add_column("events", overflow="fold", max_width=60)
        styles = {
            "running": "bold cyan",
            "failed": "bold red",
            "passed": "green",
            "known": "yellow",
            "error": "red",
            "interrupted": "yellow",
            "skipped": "dim",
            "pending": "dim",
            "not run": "dim",
        }
        for prop in state.properties.values():
            failures = Text(str(len(prop.failures)), style="bold red" if prop.failures else "")
            table.add_row(
                Text(one_line(prop.nodeid)),
                Text(prop.status, style=styles.get(prop.status, "")),
                f"{prop.examples:,}",
                f"{prop.examples_per_s:.1f}",
                failures,
                Text(str(prop.known_count), style="yellow" if prop.known_count else ""),
                fmt_left(prop) if prop.status == "running" else "",
                Text(one_line(fmt_events(prop.events))),
            )
        if not self._log:
            return table
        return Group(table, *(Text(one_line(line), style="red") for line in self._log[-8:]))


def make_progress(stream: TextIO, mode: str = "auto", interval: float = 10.0) -> Progress:
    """``auto``: rich on a terminal (when rich is installed), plain lines otherwise."""
    if mode == "none":
        return Progress(stream)
    if mode in ("auto", "rich"):
        isatty = getattr(stream, "isatty", lambda: False)()
        if mode == "rich" or isatty:
            try:
                return RichProgress(stream)
            except ImportError:
                pass
    return PlainProgress(stream, interval=interval)
