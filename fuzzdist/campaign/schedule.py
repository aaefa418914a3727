"""How ``fuzzdist run --duration`` splits its time between properties: pure logic, no pytest, no clock.

``even``: one visit per property, each an equal share of the time left when it starts (the old split).

``adaptive`` (the default), in the spirit of HypoFuzz's scheduler: the campaign runs in *slices*.

1. **Floor.** Every property first gets ``floor_fraction`` of the budget split evenly (its floor),
   so a property that looks unproductive at first still gets a fair look.
2. **Adaptive slices.** The rest goes in slices of ``slice_s`` seconds, each to the property with
   the highest *recent rate of new behaviour*: new ``event()`` values and value pairs, new or improved
   ``target()`` scores, new distinct failures, per second.  The rate is decayed: each slice the property
   runs multiplies its past finds and seconds by ``decay`` before adding the slice's, so a property
   that stops finding new behaviour loses its share quickly, whatever it found long ago (re-finding a
   known failure is not new).  Ties (e.g. every rate 0) go to the property that has had the least time,
   then to the earliest in the collection order, so the split falls back to even and is deterministic.
3. A property that can't use more time (it stopped for another reason than time: search space
   exhausted, an error, its example budget) gets no further slice.

Every grant keeps its reason, so the report can say why each property got the time it got.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fuzzdist.errors import InvalidArgument

SCHEDULES = ("adaptive", "even")
FLOOR_FRACTION = 0.5  # share of the budget split evenly before the adaptive slices
DECAY = 0.5  # weight of a property's earlier slices in its rate, per slice it runs
MIN_SLICE_S = 1.0  # shortest adaptive slice: a visit costs a Hypothesis run's set-up
SLICES_PER_PROPERTY = 4  # the adaptive part is cut into about this many slices per property


@dataclass
class Grant:
    """One visit: run ``nodeid`` for ``seconds``; ``kind`` is "floor" or "adaptive"."""

    nodeid: str
    seconds: float
    kind: str
    reason: str


@dataclass
class _Record:
    finds: float = 0.0  # decayed new behaviours
    seconds: float = 0.0  # decayed seconds run
    floor_s: float = 0.0  # seconds run in its floor
    adaptive_s: float = 0.0  # seconds run in adaptive slices given for its rate of new behaviour
    spare_s: float = 0.0  # seconds run in adaptive slices given when no property was finding anything
    adaptive_finds: int = 0  # new behaviours found in adaptive slices
    total_finds: int = 0
    slices: int = 0
    done: str | None = None  # why it gets no more time

    @property
    def rate(self) -> float:
        return self.finds / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Scheduler:
    """Decides which property runs next and for how long, from what each slice found.

    Call :meth:`next` for a grant, run it, then :meth:`record` what it took and found.  Deterministic:
    the same records give the same grants.
    """

    nodeids: Sequence[str]
    budget_s: float
    floor_fraction: float = FLOOR_FRACTION
    decay: float = DECAY
    slice_s: float | None = None
    _records: dict[str, _Record] = field(default_factory=dict)
    _spent: float = 0.0

    def __post_init__(self) -> None:
        if not self.nodeids:
            raise InvalidArgument("a schedule needs at least one property")
        if not 0.0 <= self.floor_fraction <= 1.0 or not 0.0 <= self.decay < 1.0:
            raise InvalidArgument("floor_fraction must be in [0, 1] and decay in [0, 1)")
        self._records = {nodeid: _Record() for nodeid in self.nodeids}
        n = len(self.nodeids)
        self.floor_s = self.budget_s * self.floor_fraction / n
        if self.slice_s is None:
            self.slice_s = max(MIN_SLICE_S, self.budget_s * (1 - self.floor_fraction) / (n * SLICES_PER_PROPERTY))
        self._floors = list(self.nodeids)  # floors still to give, in collection order

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
            if self._records[nodeid].done is None:
                floors_left = 1 + sum(1 for n in self._floors if self._records[n].done is None)
                # a floor never takes more than an even split of what is left
                return Grant(nodeid, min(self.floor_s, left / floors_left), "floor", "floor")
        open_ = [n for n in self.nodeids if self._records[n].done is None]
        if not open_:
            return None
        best = min(open_, key=lambda n: (-self._records[n].rate, self._time(n), self.nodeids.index(n)))
        rec = self._records[best]
        assert self.slice_s is not None  # set in __post_init__
        seconds = min(self.slice_s, left)
        if rec.rate > 0:
            reason = f"{rec.rate:.2f} new behaviours/s, the highest"
        else:
            reason = "no property is finding new behaviour: the least time so far"
        return Grant(best, seconds, "adaptive", reason)

    def record(self, grant: Grant, seconds: float, new_behaviours: int, done: str | None = None) -> None:
        """What ``grant``'s visit took (seconds, not counting pool start-up) and found; ``done``: why the
        property can't use more time (None: it stopped because its time was up)."""
        rec = self._records[grant.nodeid]
        self._spent += seconds
        rec.finds = rec.finds * self.decay + new_behaviours
        rec.seconds = rec.seconds * self.decay + seconds
        rec.total_finds += new_behaviours
        rec.slices += 1
        if grant.kind == "floor":
            rec.floor_s += seconds
        elif grant.reason.startswith("no property"):
            rec.spare_s += seconds
        else:
            rec.adaptive_s += seconds
            rec.adaptive_finds += new_behaviours
        if done is not None:
            rec.done = done

    def _time(self, nodeid: str) -> float:
        rec = self._records[nodeid]
        return rec.floor_s + rec.adaptive_s + rec.spare_s

    def share(self, nodeid: str) -> dict:
        """The time ``nodeid`` got and why, for the report."""
        rec = self._records[nodeid]
        return {"floor_s": round(rec.floor_s, 3), "adaptive_s": round(rec.adaptive_s, 3),
                "spare_s": round(rec.spare_s, 3), "slices": rec.slices, "new_behaviours": rec.total_finds,
                "recent_rate_per_s": round(rec.rate, 4), "done": rec.done,
                "why": explain(rec.floor_s, rec.adaptive_s, rec.adaptive_finds, rec.spare_s)}


def explain(floor_s: float, adaptive_s: float, adaptive_finds: int, spare_s: float = 0.0) -> str:
    """"floor 10s + 42s for new behaviour (17 found in it)", in words."""
    text = f"floor {floor_s:.0f}s"
    if adaptive_s > 0:
        text += f" + {adaptive_s:.0f}s for new behaviour ({adaptive_finds} found in it)"
    if spare_s > 0:
        text += f" + {spare_s:.0f}s spare (no property was finding new behaviour; split by least time)"
    return text
