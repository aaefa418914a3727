"""``CompletionOrder``: in what order n pending Work objects resolve, and
``completion_orders()``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from fuzzdist.errors import InvalidArgument, InvalidStrategyArgument

ACTIONS: tuple[str, ...] = ("complete", "fail", "drop", "wait")
_RESOLUTIONS = ("complete", "fail", "drop")
_MAX_WAITS_PER_GAP = 2


@dataclass(frozen=True, repr=False)
class CompletionOrder:
    """A schedule of events over ``n`` pending Work objects (indices 0..n-1).

    ``steps`` is a tuple of ``(action, index)`` in time order:

    * ``("complete", i)``: work i finishes successfully;
    * ``("fail", i)``: work i finishes with an error;
    * ``("drop", i)``: the last reference to work i is deleted before it
      resolves (it never completes from the user's point of view);
    * ``("wait", i)``: user code calls ``wait()`` on work i.

    Every index is resolved exactly once by complete, fail or drop. A wait
    never targets a work that has been dropped. Whether a wait may come
    before its work resolves (so it must block while another thread
    resolves it) is up to ``completion_orders(waits_before_resolve=...)``;
    ``has_pending_waits`` tells. Construction validates all of this.
    """

    n: int
    steps: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if self.n < 0:
            raise InvalidArgument("n must be >= 0")
        steps = tuple((str(a), int(i)) for a, i in self.steps)
        object.__setattr__(self, "steps", steps)
        resolved: dict[int, str] = {}
        for action, index in steps:
            if action not in ACTIONS:
                raise InvalidArgument(f"unknown action {action!r}")
            if not 0 <= index < self.n:
                raise InvalidArgument(f"work index {index} out of range for n={self.n}")
            if action == "wait":
                if resolved.get(index) == "drop":
                    raise InvalidArgument(f"wait on work {index} after it was dropped")
                continue
            if index in resolved:
                raise InvalidArgument(f"work {index} resolved twice")
            resolved[index] = action
        if len(resolved) != self.n:
            missing = sorted(set(range(self.n)) - set(resolved))
            raise InvalidArgument(f"works never resolved: {missing}")

    @property
    def resolution_order(self) -> tuple[int, ...]:
        """Work indices in the order they complete, fail or are dropped."""
        return tuple(i for a, i in self.steps if a != "wait")

    @property
    def is_in_order(self) -> bool:
        """Whether works resolve in index (issue) order."""
        return self.resolution_order == tuple(range(self.n))

    def _with(self, action: str) -> tuple[int, ...]:
        return tuple(sorted(i for a, i in self.steps if a == action))

    @property
    def completed(self) -> tuple[int, ...]:
        return self._with("complete")

    @property
    def failed(self) -> tuple[int, ...]:
        return self._with("fail")

    @property
    def dropped(self) -> tuple[int, ...]:
        return self._with("drop")

    @property
    def waits(self) -> tuple[int, ...]:
        """Indices waited on, in time order (repeats allowed)."""
        return tuple(i for a, i in self.steps if a == "wait")

    def outcome(self, index: int) -> str:
        """How work ``index`` resolves: "complete", "fail" or "drop"."""
        for action, i in self.steps:
            if i == index and action != "wait":
                return action
        raise IndexError(index)

    @property
    def has_pending_waits(self) -> bool:
        """Whether some wait comes before the work it waits on resolves."""
        resolved: set[int] = set()
        for action, index in self.steps:
            if action == "wait" and index not in resolved:
                return True
            if action != "wait":
                resolved.add(index)
        return False

    @property
    def is_trivial(self) -> bool:
        """In order, all completed, no waits: the schedule everything shrinks to."""
        return self.steps == tuple(("complete", i) for i in range(self.n))

    def __repr__(self) -> str:
        body = " ".join(f"{a}{i}" for a, i in self.steps)
        return f"CompletionOrder(n={self.n}: {body})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis prints dataclasses field by field unless told otherwise;
        # the short repr keeps shrunk failures readable.
        printer.text(repr(self))


def completion_orders(
    n: int,
    *,
    allow_errors: bool = True,
    allow_drops: bool = True,
    allow_waits: bool = True,
    waits_before_resolve: bool = False,
) -> st.SearchStrategy[CompletionOrder]:
    """Orders in which ``n`` pending Work objects resolve.

    Covers every resolution order (a permutation of the works), each work
    completing, failing with an error (``allow_errors``) or being dropped
    before it resolves (``allow_drops``), and waits interleaved anywhere
    (``allow_waits``): by default only on works already completed or failed,
    so a single thread can replay the steps in order; with
    ``waits_before_resolve=True`` also on works still pending (the replay
    then has to resolve them from another thread while the wait blocks).
    Waits never target a dropped work.

    Shrinks towards in-order completion with no errors, drops or waits:
    ``complete0 complete1 ... complete(n-1)``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidStrategyArgument(f"n must be an int >= 0, got {n!r}")
    outcomes = ["complete"]
    if allow_errors:
        outcomes.append("fail")
    if allow_drops:
        outcomes.append("drop")

    @st.composite
    def draw_order(draw: st.DrawFn) -> CompletionOrder:
        order = draw(st.permutations(range(n)))
        steps: list[tuple[str, int]] = []
        waitable: list[int] = []  # completed or failed, in resolution order
        pending = list(range(n))

        def maybe_wait() -> None:
            if not allow_waits or n == 0:
                return
            # Always the same draws whatever came before (waits on works that
            # can't be waited on yet are skipped), so that choosing "drop" or
            # "fail" never shortens the choice sequence: Hypothesis shrinks
            # towards shorter sequences and would otherwise prefer them.
            targets = set(waitable) | (set(pending) if waits_before_resolve else set())
            for index in draw(st.lists(st.integers(0, n - 1), max_size=_MAX_WAITS_PER_GAP)):
                if index in targets:
                    steps.append(("wait", index))

        for index in order:
            maybe_wait()
            action = draw(st.sampled_from(outcomes))
            steps.append((action, index))
            pending.remove(index)
            if action != "drop":
                waitable.append(index)
        maybe_wait()
        return CompletionOrder(n, tuple(steps))

    return draw_order()
