"""How ``fuzzdist run --duration`` splits its time between properties: pure logic, no pytest, no clock.

``even``: one visit per property, each an equal share of the time left when it starts (the old split).

``adaptive`` (the default), in the spirit of HypoFuzz's scheduler: the campaign runs in *visits*.

1. **Floor, in examples.** Every property first gets ``floor_examples`` examples, however slow they
   are, in collection order: the visit ends at that count, or at an even split of the time left
   between the floors still to give (so one very slow property can't starve the others' floors).
   A floor cut short by that cap is *continued* once every property has had its first floor visit,
   before any adaptive slice, with an even split of the time then left between the floors still
   short; a continuation that runs no example ends its property's floor (it would never finish).
   Counting examples, not seconds, is what makes a slow property (FSDP at 4 ranks) get a real look:
   a floor of seconds gives it a handful of examples and a cheap one thousands.
2. **Adaptive slices.** The rest goes in slices, each to the property with the highest recent
   *score* per second.  A slice's score:

   - a new distinct failure scores 1 (always worth more time: shrinking it, and its neighbours);
   - new behaviour is *normalised per property*: the slice's new behaviours divided by what the
     property had reached before it, plus one.  A property whose every example names several
     layouts or patterns keeps reaching new event values long after it stopped finding anything
     that matters; normalised, its tenth new value in a hundred scores what one new value scores
     for a property that knew ten, so variety alone doesn't buy time;
   - where rank-side line coverage is on (``--cover``), new *lines* are the main signal (weight
     ``LINES_WEIGHT``) and new ``event()``/``target()`` behaviour a minor one (``EVENTS_WEIGHT_WITH_LINES``).

   The rate is decayed: each slice the property runs multiplies its past score and seconds by
   ``decay`` before adding the slice's, so a property that stops finding loses its share quickly.
   Ties (e.g. every rate 0) go to the property that has had the least time, then to the earliest
   in the collection order, so the split falls back to even and is deterministic.
3. **What an example costs.** The scheduler keeps each property's seconds per example (decayed as
   its rate is).  A slice is never shorter than ``SLICE_EXAMPLES`` examples' worth of a property's
   cost (a 1 s slice of a 2 s-per-example property would run nothing), and the report shows the cost.
4. A property that can't use more time (it stopped for another reason than its visit's end:
   search space exhausted, an error, its example budget) gets no further visit.

Every grant keeps its reason, so the report can say why each property got the time it got.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fuzzdist.errors import InvalidArgument

SCHEDULES = ("adaptive", "even")
FLOOR_EXAMPLES = 20  # examples every property gets before the adaptive slices
DECAY = 0.5  # weight of a property's earlier slices in its rate, per slice it runs
MIN_SLICE_S = 1.0  # shortest adaptive slice: a visit costs a Hypothesis run's set-up
SLICE_EXAMPLES = 5  # an adaptive slice lasts at least this many of the property's examples
SLICES_PER_PROPERTY = 4  # the time after the floors is cut into about this many slices per property
ADAPTIVE_SHARE = 0.5  # slice length: this share of the budget over SLICES_PER_PROPERTY slices a property
FAILURE_SCORE = 1.0  # what a new distinct failure scores
LINES_WEIGHT = 1.0  # normalised new rank-side lines, where coverage is on: the main signal
EVENTS_WEIGHT_WITH_LINES = 0.25  # normalised new events/targets, where coverage is on
EVENTS_WEIGHT = 1.0  # normalised new events/targets, without coverage


@dataclass(frozen=True)
class Finds:
    """What one visit reached that the property had not reached before: new distinct failures, new
    ``event()``/``target()`` behaviour (values, value pairs, labels, better scores), new rank-side lines."""

    failures: int = 0
    behaviours: int = 0
    lines: int = 0

    @property
    def total(self) -> int:
        return self.failures + self.behaviours + self.lines


@dataclass
class Grant:
    """One visit: run ``nodeid`` for ``seconds``, or until it has run ``examples`` examples (None: no
    such limit); ``kind`` is "floor" or "adaptive"."""

    nodeid: str
    seconds: float
    kind: str
    reason: str
    examples: int | None = None


@dataclass
class _Record:
    score: float = 0.0  # decayed normalised finds
    seconds: float = 0.0  # decayed seconds run
    cost_seconds: float = 0.0  # decayed seconds, for the cost per example
    cost_examples: float = 0.0  # decayed examples, for the cost per example
    known_behaviours: int = 0  # event()/target() behaviour reached so far
    known_lines: int = 0  # rank-side lines reached so far
    examples: int = 0
    floor_s: float = 0.0  # seconds run in its floor
    adaptive_s: float = 0.0  # seconds run in adaptive slices given for its rate of new behaviour
    spare_s: float = 0.0  # seconds run in adaptive slices given when no property was finding anything
    adaptive_finds: int = 0  # new behaviours found in adaptive slices
    total_finds: int = 0
    slices: int = 0
    floor_stalled: bool = False  # a floor visit ran no example: its floor is not continued
    done: str | None = None  # why it gets no more time

    @property
    def rate(self) -> float:
        return self.score / self.seconds if self.seconds > 0 else 0.0

    @property
    def cost_s(self) -> float | None:
        """Seconds per example, recent ones weighing more (None: no example yet)."""
        return self.cost_seconds / self.cost_examples if self.cost_examples > 0 else None


def score(finds: Finds, known_behaviours: int, known_lines: int, lines_on: bool) -> float:
    """A visit's finds, normalised per property: failures count whole, new behaviour and new lines
    relative to what the property had reached before the visit (see the module's docstring)."""
    events_weight = EVENTS_WEIGHT_WITH_LINES if lines_on else EVENTS_WEIGHT
    value = FAILURE_SCORE * finds.failures + events_weight * finds.behaviours / (known_behaviours + 1)
    if lines_on:
        value += LINES_WEIGHT * finds.lines / (known_lines + 1)
    return value


@dataclass
class Scheduler:
    """Decides which property runs next and for how long, from what each visit found.

    Call :meth:`next` for a grant, run it, then :meth:`record` what it took and found.  Deterministic:
    the same records give the same grants.  ``lines_on``: rank-side line coverage is measured (it is
    then the main signal).
    """

    nodeids: Sequence[str]
    budget_s: float
    floor_examples: int = FLOOR_EXAMPLES
    decay: float = DECAY
    slice_s: float | None = None
    lines_on: bool = False
    _records: dict[str, _Record] = field(default_factory=dict)
    _spent: float = 0.0

    def __post_init__(self) -> None:
        if not self.nodeids:
            raise InvalidArgument("a schedule needs at least one property")
        if self.floor_examples < 0 or not 0.0 <= self.decay < 1.0:
            raise InvalidArgument("floor_examples must be at least 0 and decay in [0, 1)")
        self._records = {nodeid: _Record() for nodeid in self.nodeids}
        n = len(self.nodeids)
        if self.slice_s is None:
            self.slice_s = max(MIN_SLICE_S, self.budget_s * ADAPTIVE_SHARE / (n * SLICES_PER_PROPERTY))
        self._floors = list(self.nodeids) if self.floor_examples else []  # floors still to give, in order

    @property
    def remaining_s(self) -> float:
        return max(0.0, self.budget_s - self._spent)

    def next(self) -> Grant | None:
        """The next visit, or None when the budget is spent or no property can use more time."""
        left = self.remaining_s
        if left <= 0:
            return None
        while self._floors:
            nodeid = self._floors.pop(0)
            if self._floor_short(nodeid):
                floors_left = 1 + sum(1 for n in self._floors if self._records[n].done is None)
                # a floor never takes more than an even split of what is left
                return self._floor_grant(nodeid, left / floors_left, "")
        short = [n for n in self.nodeids if self._floor_short(n)] if self.floor_examples else []
        if short:  # floors cut by their time cap: finished before any adaptive slice
            return self._floor_grant(short[0], left / len(short), ", continued")
        open_ = [n for n in self.nodeids if self._records[n].done is None]
        if not open_:
            return None
        best = min(open_, key=lambda n: (-self._records[n].rate, self._time(n), self.nodeids.index(n)))
        rec = self._records[best]
        assert self.slice_s is not None  # set in __post_init__
        seconds = self.slice_s
        if rec.cost_s is not None:  # long enough to run a few of its examples
            seconds = max(seconds, SLICE_EXAMPLES * rec.cost_s)
        seconds = min(seconds, left)
        if rec.rate > 0:
            reason = f"{rec.rate:.3f} new behaviour/s (normalised), the highest"
        else:
            reason = "no property is finding new behaviour: the least time so far"
        return Grant(best, seconds, "adaptive", reason)

    def _floor_short(self, nodeid: str) -> bool:
        """Whether ``nodeid`` still needs (and can use) floor examples."""
        rec = self._records[nodeid]
        return rec.done is None and not rec.floor_stalled and rec.examples < self.floor_examples

    def _floor_grant(self, nodeid: str, seconds: float, note: str) -> Grant:
        rec = self._records[nodeid]
        examples = self.floor_examples - rec.examples
        return Grant(nodeid, seconds, "floor", f"floor: {self.floor_examples} examples{note}", examples=examples)

    def record(
        self, grant: Grant, seconds: float, finds: Finds | int, done: str | None = None, examples: int = 0
    ) -> None:
        """What ``grant``'s visit took (seconds, not counting pool start-up), ran (``examples``) and
        found (a bare int: that many new behaviours); ``done``: why the property can't use more time
        (None: it stopped because its visit was over)."""
        if isinstance(finds, int):
            finds = Finds(behaviours=finds)
        rec = self._records[grant.nodeid]
        self._spent += seconds
        rec.score = rec.score * self.decay + score(finds, rec.known_behaviours, rec.known_lines, self.lines_on)
        rec.seconds = rec.seconds * self.decay + seconds
        if examples > 0:
            rec.cost_seconds = rec.cost_seconds * self.decay + seconds
            rec.cost_examples = rec.cost_examples * self.decay + examples
        rec.known_behaviours += finds.behaviours
        rec.known_lines += finds.lines
        rec.examples += examples
        rec.total_finds += finds.total
        rec.slices += 1
        if grant.kind == "floor":
            rec.floor_s += seconds
            rec.floor_stalled = rec.floor_stalled or examples == 0
        elif grant.reason.startswith("no property"):
            rec.spare_s += seconds
        else:
            rec.adaptive_s += seconds
            rec.adaptive_finds += finds.total
        if done is not None:
            rec.done = done

    def _time(self, nodeid: str) -> float:
        rec = self._records[nodeid]
        return rec.floor_s + rec.adaptive_s + rec.spare_s

    def share(self, nodeid: str) -> dict:
        """The time ``nodeid`` got and why, for the report."""
        rec = self._records[nodeid]
        cost = rec.cost_s
        return {
            "floor_s": round(rec.floor_s, 3),
            "adaptive_s": round(rec.adaptive_s, 3),
            "spare_s": round(rec.spare_s, 3),
            "slices": rec.slices,
            "new_behaviours": rec.total_finds,
            "recent_rate_per_s": round(rec.rate, 4),
            "done": rec.done,
            "cost_per_example_s": None if cost is None else round(cost, 4),
            "why": explain(rec.floor_s, rec.adaptive_s, rec.adaptive_finds, rec.spare_s),
        }


def explain(floor_s: float, adaptive_s: float, adaptive_finds: int, spare_s: float = 0.0) -> str:
    """ "floor 10s + 42s for new behaviour (17 found in it)", in words."""
    text = f"floor {floor_s:.0f}s"
    if adaptive_s > 0:
        text += f" + {adaptive_s:.0f}s for new behaviour ({adaptive_finds} found in it)"
    if spare_s > 0:
        text += f" + {spare_s:.0f}s spare (no property was finding new behaviour; split by least time)"
    return text
