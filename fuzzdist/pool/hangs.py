"""Why the ranks hung: every rank's snapshot turned into one explanation.

The pool reads a :class:`~fuzzdist.pool.rank.rank_state.RankState` from each rank
that has not finished the example (the collectives it issued in this
example, from torch's flight recorder; the ``torch.distributed`` call it
waits in; its own innermost line; the Works it holds).  :func:`diagnose`
compares them and names the first point where the ranks disagree, in the
order a distributed engineer would look:

1. **Mismatch** (certain deadlock): two ranks wait on the same group at the
   same step in different collectives, or the same collective with other
   shapes, dtypes or root.
2. **Missed collective**: a rank waits in step *k* of a group that a peer
   never entered.  Certain when the peer has finished the example (returned
   or raised); when the peer is still running its own code it may just be
   slow, so only the timeout declares it.
3. **Stuck collective**: every rank entered the same collective and it does
   not complete (a backend hang, or a very large op).
4. **Pending Work**: a rank waits on a Work (one of a Python ProcessGroup,
   say) and no collective is in flight; the Works its holders describe are
   listed.
5. **Endless loop**: a rank running its own code was caught at the same loop's
   jump back in the last :data:`LOOP_READINGS` readings or more (the pool's
   probes during the example, then the one at the timeout), its thread using
   the CPU meanwhile: a loop that doesn't end, most likely, whether its peers
   wait for it or not.  A rank waiting in a call (a sleep, a long torch op)
   stands at the call, never at a jump back, so it is not taken for a loop.
6. **Slow**: the ranks run their own code and wait on nobody, and no loop
   held one of them in place: slow, not stuck.

Where the flight recorder can't say what a rank issued (switched off, or a
torch whose recorder skips the backend: ``RankState.unrecorded`` says which),
the stacks alone name the call each rank is inside; without the steps that
is never a certain deadlock.

A *certain* deadlock lets the pool stop waiting at once (it confirms the
same picture twice first: the snapshots of different ranks are not taken
at the same instant).  Each kind is its own :class:`~fuzzdist.errors.Hang`
subclass, raised at the stuck rank's own line (:meth:`Diagnosis.origin`),
so Hypothesis keeps different hangs apart and shrinks each toward itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fuzzdist.errors import (
    CollectiveMismatch,
    EndlessLoop,
    Hang,
    MissedCollective,
    PendingWork,
    SlowExample,
    StuckCollective,
    UnexplainedHang,
)
from fuzzdist.pool import remote as _remote
from fuzzdist.pool.rank.rank_state import Collective, RankState, Site

_HISTORY = 8  # collectives shown per rank: the last few before the hang
# Readings in a row that must catch a rank at the same loop before it is called endless.  The probes
# read a running example at 0.05, 0.1, 0.2, 0.4, 0.8, 1.6 s and then every 2 s, and once more at the
# timeout, so any timeout of 1 s or more gives a loop that started early three readings or more.
LOOP_READINGS = 3


@dataclass(frozen=True)
class Loop:
    """A rank caught at the same loop's jump back in consecutive readings (see the module docstring).

    ``site``: the loop's line (the innermost frame, user code or not); ``readings``: how many readings
    in a row caught it there; ``seconds``: the time they span; ``cpu``: the CPU seconds the example's
    thread used over that span (None where the platform can't tell).
    """

    rank: int
    site: Site
    readings: int
    seconds: float
    cpu: float | None

    def describe(self) -> str:
        """'rank 1 is busy in prop.py:12 (spin) across 5 samples over 2.9s ...'."""
        cpu = "" if self.cpu is None else f", {self.cpu:.2f}s of CPU"
        return (
            f"rank {self.rank} is busy in {os.path.basename(self.site.filename)}:{self.site.lineno} "
            f"({self.site.function}) across {self.readings} samples over {self.seconds:.1f}s{cpu}, "
            "waiting on nobody: looks like a loop that doesn't end"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain values for JSON reports."""
        return {
            "rank": self.rank,
            "file": self.site.filename,
            "line": self.site.lineno,
            "function": self.site.function,
            "readings": self.readings,
            "seconds": round(self.seconds, 3),
            "cpu": None if self.cpu is None else round(self.cpu, 3),
        }


@dataclass(frozen=True)
class Diagnosis:
    """The explanation of one hang.

    ``kind``: the :class:`~fuzzdist.errors.Hang` subclass; ``deadlock``:
    nothing can ever complete (so the pool need not wait for the timeout);
    ``summary``: one line; ``ranks[r]``: where rank r stands, in a few words;
    ``details[r]``: its collectives in this example and its pending Works;
    ``site``: the stuck rank's own line, the hang's identity; ``loop``: for an
    :class:`~fuzzdist.errors.EndlessLoop`, the loop and the readings that caught it.
    """

    kind: type[Hang]
    deadlock: bool
    summary: str
    ranks: dict[int, str] = field(default_factory=dict)
    details: dict[int, str] = field(default_factory=dict)
    site: Site | None = None
    loop: Loop | None = None

    @property
    def may_be_slow(self) -> bool:
        """Could a longer timeout let the example finish?"""
        return self.kind in (SlowExample, StuckCollective, UnexplainedHang, MissedCollective) and not self.deadlock

    def origin(self) -> Hang:
        """A :attr:`kind` exception whose traceback ends at :attr:`site` (see the module docstring)."""
        exc = self.kind(self.summary)
        try:
            if self.site is not None:
                _remote._raiser(self.site.filename, self.site.lineno, self.site.function)(exc)
            raise exc
        except Hang as raised:
            exc = raised
        exc.__context__ = None
        return exc

    def to_dict(self) -> dict[str, Any]:
        """Plain values for JSON reports."""
        return {
            "kind": self.kind.__name__,
            "deadlock": self.deadlock,
            "summary": self.summary,
            "ranks": {str(r): text for r, text in sorted(self.ranks.items())},
            "site": None if self.site is None else f"{self.site.filename}:{self.site.lineno} in {self.site.function}",
            "loop": None if self.loop is None else self.loop.to_dict(),
        }


def diagnose(
    states: Mapping[int, RankState | None],
    finished: Mapping[int, str],
    world_size: int,
    dead: Mapping[int, str] | None = None,
    earlier: Mapping[int, Sequence[RankState]] | None = None,
) -> Diagnosis:
    """Explain why the ranks still running example ``seq`` hang.

    ``states[r]`` is rank r's snapshot (running or finished; None where it
    didn't answer); ``finished[r]`` says how rank r ended the example
    ("returned", "raised ValueError") if it did; ``dead[r]`` how a rank that
    died during it died ("SIGABRT"); ``earlier[r]`` rank r's earlier readings
    in this example, oldest first (light or full), which tell a loop that
    doesn't end.
    """
    dead = dict(dead or {})
    known = {r: s for r, s in sorted(states.items()) if s is not None}
    running = {r: s for r, s in known.items() if r not in finished and not s.finished}
    heads = {r: s.in_flight()[0] for r, s in running.items() if s.in_flight()}
    where = {r: _where(s) for r, s in running.items()}
    where.update(
        {
            r: "did not answer (no snapshot)"
            for r, s in states.items()
            if s is None and r not in finished and r not in dead
        }
    )
    details = {r: _details(s) for r, s in running.items()}
    loops = {
        r: loop for r, s in running.items() if (loop := _endless_loop(r, [*(earlier or {}).get(r, ()), s])) is not None
    }
    for r, loop in loops.items():
        where[r] = f"going round a loop {_site(running[r])}, {loop.readings} samples in a row"

    def verdict(kind: type[Hang], deadlock: bool, summary: str, rank: int | None) -> Diagnosis:
        site = running[rank].user_site if rank is not None and rank in running else _first_site(running)
        return Diagnosis(kind, deadlock, summary + _first_disagreement(known, summary), where, details, site)

    def looping(waits: str = "") -> Diagnosis:
        loop = loops[min(loops)]
        summary = loop.describe() + waits
        summary += _first_disagreement(known, summary)
        return Diagnosis(EndlessLoop, False, summary, where, details, loop.site, loop)

    waiting = sorted(heads.items())
    # 1. A waiting rank's collective disagrees with what a peer did or does at the same step.
    for r, a in waiting:
        for q, peer in known.items():
            if q == r or a.p2p or q not in _peers(a, running[r], world_size, known):
                continue
            b = _at_step(peer, a.group, a.step)
            if b is None:
                continue
            # Roots are read from the call each rank is in: compare them only when that call is this step's.
            both_in_call = not b.done and q in running and running[r].call == a.op and running[q].call == b.op
            if b.signature() != a.signature() or (both_in_call and _roots(running[r]) != _roots(running[q])):
                doing = f"waits in {_call(b, peer)}" if not b.done else f"completed {b.describe()}"
                never = f" which rank {q} never entered" if a.op != b.op else ""
                return verdict(
                    CollectiveMismatch,
                    True,
                    f"rank {r} waits in {_call(a, running[r])}{never}; rank {q} {doing} ({_disagreement(a, b)})",
                    r,
                )

    # 2. A waiting rank's peer never reached that step.
    for r, a in waiting:
        for q in _peers(a, running[r], world_size, known):
            if q == r:
                continue
            if q in dead:
                return verdict(
                    MissedCollective,
                    True,
                    f"rank {r} waits in {_call(a, running[r])}, which rank {q} can never join: it died ({dead[q]})",
                    r,
                )
            other = known.get(q)
            entered = None if other is None else len(_steps(other, a.group, a.p2p))
            # A peer that left after doing this very step (a broadcast's root returns once it has sent) did
            # not miss it: the waiting rank is about to see it complete.
            if (q in finished or (other is not None and other.finished)) and (entered is None or entered < a.step):
                how = finished.get(q, "finished the example")
                after = "" if entered is None else f" after {entered} collective{'s' * (entered != 1)} on that group"
                return verdict(
                    MissedCollective,
                    True,
                    f"rank {r} waits in {_call(a, running[r])} which rank {q} never entered: "
                    f"rank {q} {how}{after} and left the example",
                    r,
                )
            if other is not None and q not in heads and not a.p2p and entered is not None and entered < a.step:
                if q in loops:
                    return looping(f"; rank {r} waits for it in {_call(a, running[r])}")
                return verdict(
                    MissedCollective,
                    False,
                    f"rank {r} waits in {_call(a, running[r])}; rank {q} never reached "
                    f"collective #{a.step}: it is in its own code, {_site(other)}",
                    r,
                )

    # 3. Everyone entered the same collective, which does not complete.
    if waiting and len(waiting) == len(running):
        r, a = waiting[0]
        return verdict(
            StuckCollective,
            False,
            f"every rank still running waits in {_call(a, running[r])}, which every rank "
            "entered: the collective itself does not complete",
            r,
        )

    # 3a. Inside torch.distributed calls where the flight recorder can't say what this rank issued (off,
    # or it records no collective of this backend): the stacks alone tell what each rank is in, not at
    # which step, so nothing proves a deadlock.
    inside = {
        r: s
        for r, s in running.items()
        if r not in heads and s.call and not s.call.endswith(".wait") and not s.pending_works
    }
    if any(s.collectives is None for s in inside.values()):
        return _from_stacks(inside, running, finished, dead, verdict)

    # 3b. Inside a torch.distributed call with no record of it in flight: the backend keeps no
    # flight record, or the rank is blocked before the op was issued (TORCH_DISTRIBUTED_DEBUG=DETAIL's
    # fingerprint check, say).  Nothing proves a deadlock.
    for r, s in running.items():
        if r not in heads and s.call and not s.call.endswith(".wait") and not s.pending_works:
            left = [q for q in finished if q != r]
            peers = f"; rank {left[0]} {finished[left[0]]} and left the example" if left else ""
            return verdict(
                MissedCollective if left else StuckCollective,
                False,
                f"rank {r} is inside {s.call} {_site(s)}, with no record of it in flight (the "
                f"backend records none, or the call blocked before issuing it){peers}",
                r,
            )

    # 4. A rank waits on a Work that no collective in flight will complete.
    for r, s in running.items():
        if r not in heads and (s.pending_works or (s.call or "").endswith(".wait")):
            pending = "; ".join(s.pending_works) or "its holder describes no pending Work"
            return verdict(
                PendingWork,
                False,
                f"rank {r} waits on a Work with no collective in flight, {_site(s)} (pending: {pending})",
                r,
            )

    # 5. A rank goes round one loop, reading after reading; 6. nobody waits on anybody.
    if loops:
        return looping("".join(f"; rank {r} waits in {_call(a, running[r])}" for r, a in waiting))
    if running and not waiting:
        r, s = next(iter(running.items()))
        unknown = s.unrecorded or "no flight recorder"
        recorder = "" if s.collectives is not None else f" (collectives unknown: {unknown})"
        return verdict(
            SlowExample, False, f"slow, not stuck: rank {r} is running its own code, {_site(s)}{recorder}", r
        )
    if running:
        r = waiting[0][0]
        return verdict(
            StuckCollective,
            False,
            f"rank {r} waits in {_call(waiting[0][1], running[r])}; the others run their own code",
            r,
        )
    return Diagnosis(
        UnexplainedHang,
        False,
        "no rank still running answered a snapshot: only their stacks are known",
        where,
        details,
        None,
    )


def _from_stacks(
    inside: Mapping[int, RankState],
    running: Mapping[int, RankState],
    finished: Mapping[int, str],
    dead: Mapping[int, str],
    verdict: Any,
) -> Diagnosis:
    """What the stacks alone say when the flight recorder can't: the call each rank is inside, which ranks
    left, and why no step is known.  Never a certain deadlock: without the records, a rank inside
    all_reduce may be at another step than a peer inside broadcast, and a call a peer left may complete."""
    parts = [f"rank {r} is inside {_stack_call(s)} {_site(s)}" for r, s in inside.items()]
    parts += [f"rank {r} is running its own code {_site(s)}" for r, s in running.items() if r not in inside]
    parts += [f"rank {q} {how} and left the example" for q, how in sorted(finished.items()) if q not in running]
    parts += [f"rank {q} died ({how})" for q, how in sorted(dead.items())]
    calls = {(s.call, tuple(sorted(_roots(s).items()))) for s in inside.values()}
    r = next(iter(inside))
    if finished or dead:
        kind: type[Hang] = MissedCollective
        clue = ""
    elif len(calls) > 1:
        kind, clue = CollectiveMismatch, " (different calls: probably a mismatch)"
    else:
        kind, clue = StuckCollective, ""
    reasons = sorted(
        {s.unrecorded or "the flight recorder could not be read" for s in inside.values() if s.collectives is None}
    )
    return verdict(
        kind,
        False,
        "; ".join(parts) + clue + f"; {'; '.join(reasons)}, so the step each rank is at is "
        "unknown and nothing proves a deadlock: declared at the timeout",
        r,
    )


def _stack_call(state: RankState) -> str:
    """'broadcast(src=0)': the call a rank is inside, with the root or peer it was given, read from its stack."""
    args = ", ".join(f"{k}={v}" for k, v in state.call_args if k != "tag")
    return f"{state.call}({args})" if args else str(state.call)


def _steps(state: RankState, group: str, p2p: bool) -> list[Collective]:
    return [c for c in state.collectives or () if c.group == group and c.p2p == p2p]


def _at_step(state: RankState, group: str, step: int) -> Collective | None:
    steps = _steps(state, group, False)
    return steps[step - 1] if len(steps) >= step else None


def _first_disagreement(known: Mapping[int, RankState], summary: str) -> str:
    """'; the ranks first disagreed at ...' when that is earlier than what the summary names."""
    ranks = sorted(known)
    for r in ranks:
        for c in known[r].collectives or ():
            if c.p2p:
                continue
            for q in ranks:
                b = _at_step(known[q], c.group, c.step) if q > r else None
                if b is not None and b.signature() != c.signature():
                    if f"#{c.step}" in summary:
                        return ""
                    return (
                        f"; they first disagreed at step {c.step}: rank {r} {c.describe()}, "
                        f"rank {q} {b.describe()} ({_disagreement(c, b)}), which completed anyway"
                    )
    return ""


# -- describing ------------------------------------------------------------------


def _call(c: Collective, state: RankState) -> str:
    """'broadcast #3 (src=0, int64[2])': the recorded collective with the root the caller passed."""
    args = [f"{k}={v}" for k, v in state.call_args if k != "tag"] if state.call == c.op else []
    tensors = [f"{d}{list(s)}" for d, s in zip(c.dtypes, c.shapes, strict=False)]
    group = "" if c.group == "0" else f" on group {c.group_desc or c.group}"
    kind = "p2p " if c.p2p else ""
    return f"{c.op} {kind}#{c.step}{group} ({', '.join(args + tensors)})"


def _roots(state: RankState) -> dict[str, str]:
    return {k: v for k, v in state.call_args if k in ("src", "dst", "group_src", "group_dst")}


def _disagreement(a: Collective, b: Collective) -> str:
    if a.step != b.step:
        return f"one is at step {a.step}, the other at step {b.step}"
    if a.op != b.op:
        return f"different collectives at step {a.step}"
    if a.shapes != b.shapes:
        return f"same collective, different shapes at step {a.step}"
    if a.dtypes != b.dtypes:
        return f"same collective, different dtypes at step {a.step}"
    return f"same collective, different roots at step {a.step}"


def _site(state: RankState) -> str:
    site = state.user_site
    if site is None:
        return "at an unknown line"
    text = f" ({site.text})" if site.text else ""
    return f"in {site.function} at line {site.lineno} of {os.path.basename(site.filename)}{text}"


def _where(state: RankState) -> str:
    head = state.in_flight()
    if head:
        return f"waits in {_call(head[0], state)} {_site(state)}"
    if state.pending_works:
        return f"waits on a Work ({len(state.pending_works)} pending) {_site(state)}"
    if state.call:
        return f"inside {state.call} {_site(state)}"
    return f"running its own code {_site(state)}"


def _details(state: RankState) -> str:
    lines = []
    if state.collectives is None:
        lines.append(f"collectives: unknown ({state.unrecorded or 'the flight recorder could not be read'})")
    elif state.collectives:
        shown = state.collectives[-_HISTORY:]
        earlier = len(state.collectives) - len(shown)
        items = [f"{_call(c, state) if not c.done else c.describe()} {'done' if c.done else 'WAITING'}" for c in shown]
        lines.append("collectives this example: " + (f"({earlier} earlier) " if earlier else "") + "; ".join(items))
    else:
        lines.append("collectives this example: none")
    for work in state.pending_works:
        lines.append(f"pending: {work}")
    if state.note:
        lines.append(f"note: {state.note}")
    return "\n".join(lines)


def _peers(c: Collective, state: RankState, world_size: int, known: Mapping[int, RankState]) -> list[int]:
    """The ranks that must join ``c`` (for a send or recv: its peer)."""
    if c.p2p:
        peer = dict(state.call_args)
        for key in ("src", "dst"):
            if peer.get(key, "None").lstrip("-").isdigit():
                return [int(peer[key])]
        return []
    if c.group_ranks:
        return list(c.group_ranks)
    if c.group == "0" or c.group_desc == "default_pg":
        return list(range(world_size))
    return [r for r, s in known.items() if _steps(s, c.group, False)]  # membership unknown: who used it


def _endless_loop(rank: int, readings: Sequence[RankState]) -> Loop | None:
    """The loop ``rank`` was caught at in its last LOOP_READINGS readings or more (oldest first), each
    running its own code at the same loop's jump back, its thread using the CPU between them; else None."""
    run: list[RankState] = []
    for s in reversed(readings):
        if (
            s.spinning is None
            or s.finished
            or s.call is not None
            or s.in_flight()
            or s.pending_works
            or s.unfinished_ops
            or (run and (s.seq, s.spinning, s.user_site) != (run[0].seq, run[0].spinning, run[0].user_site))
        ):
            break
        run.append(s)
    if len(run) < LOOP_READINGS:
        return None
    last, first = run[0], run[-1]
    cpu = None if last.cpu is None or first.cpu is None else last.cpu - first.cpu
    if cpu is not None and cpu <= 0:
        return None  # caught at the same jump but not running: blocked on the GIL, say, not spinning
    assert last.spinning is not None
    return Loop(rank, last.spinning, len(run), last.elapsed - first.elapsed, cpu)


def _first_site(running: Mapping[int, RankState]) -> Site | None:
    return next((s.user_site for s in running.values() if s.user_site is not None), None)
