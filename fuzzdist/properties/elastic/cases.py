"""What one elastic example draws: ``ElasticCase`` (a job's workers, steps, ``--max-restarts`` and the
failures injected, one per attempt) and ``RendezvousCase`` (agents started with ``--nnodes MIN:MAX``), with
their strategies, shrinking towards one worker, one step, no restart and no failure."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from fuzzdist.errors import InvalidArgument

SIGNALS = ("SIGKILL", "SIGTERM", "SIGUSR1")
"""The signals a worker may die of (each ends a process by default; none dumps core)."""


@dataclass(frozen=True)
class Failure:
    """One worker's death in one attempt: rank ``rank`` at the first step from ``step`` it runs,
    ``when`` ("before" or "after") that step's ``all_reduce``, by ``os._exit(exit_code)`` or ``signal``."""

    rank: int = 0
    step: int = 0
    when: str = "before"
    exit_code: int = 1
    signal: str = ""

    def __post_init__(self) -> None:
        if self.when not in ("before", "after") or self.signal not in ("", *SIGNALS) or not 1 <= self.exit_code <= 255:
            raise InvalidArgument(
                f"Failure(when={self.when!r}, signal={self.signal!r}, exit_code={self.exit_code}): expected "
                f"'before' or 'after', '' or one of {', '.join(SIGNALS)}, and an exit code in [1, 255]"
            )


@dataclass(frozen=True)
class ElasticCase:
    """A job of ``nproc`` workers on one node running ``steps`` steps under ``torchrun --max-restarts
    max_restarts``; ``failures[i]`` kills a worker in attempt ``i``."""

    nproc: int = 1
    steps: int = 1
    max_restarts: int = 0
    failures: tuple[Failure, ...] = ()

    def __post_init__(self) -> None:
        if self.nproc < 1 or self.steps < 1 or self.max_restarts < 0:
            raise InvalidArgument(
                f"ElasticCase(nproc={self.nproc}, steps={self.steps}, max_restarts={self.max_restarts}): "
                "expected at least one worker and one step, and max_restarts >= 0"
            )
        for f in self.failures:
            if not (0 <= f.rank < self.nproc and 0 <= f.step < self.steps):
                raise InvalidArgument(f"ElasticCase: {f} outside {self.nproc} workers and {self.steps} steps")

    @property
    def finishes(self) -> bool:
        """Whether the documented agent finishes the job: no more failures than restarts."""
        return len(self.failures) <= self.max_restarts


@st.composite
def failures(draw: st.DrawFn, nproc: int, steps: int) -> Failure:
    """One :class:`Failure` within ``nproc`` workers and ``steps`` steps."""
    how = draw(st.sampled_from(("exit", *SIGNALS)), label="how")
    return Failure(
        rank=draw(st.integers(0, nproc - 1), label="rank"),
        step=draw(st.integers(0, steps - 1), label="step"),
        when=draw(st.sampled_from(("before", "after")), label="when"),
        exit_code=draw(st.integers(1, 255), label="exit_code") if how == "exit" else 1,
        signal="" if how == "exit" else how,
    )


@st.composite
def elastic_cases(draw: st.DrawFn, max_nproc: int = 2, max_restarts: int = 2) -> ElasticCase:
    """An :class:`ElasticCase`: up to ``max_nproc`` workers, 1 to 3 steps, up to ``max_restarts`` restarts
    and up to one failure more than the restarts (so that a job that must fail is drawn too)."""
    if max_nproc < 1 or max_restarts < 0:
        raise InvalidArgument(f"elastic_cases(max_nproc={max_nproc}, max_restarts={max_restarts}): expected >= 1, >= 0")
    nproc = draw(st.integers(1, max_nproc), label="nproc")
    steps = draw(st.integers(1, 3), label="steps")
    restarts = draw(st.integers(0, max_restarts), label="max_restarts")
    drawn = draw(st.lists(failures(nproc, steps), max_size=restarts + 1), label="failures")
    return ElasticCase(nproc=nproc, steps=steps, max_restarts=restarts, failures=tuple(drawn))


@dataclass(frozen=True)
class RendezvousCase:
    """``agents`` torchrun agents of one worker each, started with ``--nnodes min_nodes:max_nodes`` on
    one machine over a c10d rendezvous on localhost; there may be more agents than ``max_nodes``."""

    agents: int = 1
    min_nodes: int = 1
    max_nodes: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.min_nodes <= min(self.agents, self.max_nodes):
            raise InvalidArgument(
                f"RendezvousCase(agents={self.agents}, min_nodes={self.min_nodes}, max_nodes={self.max_nodes}): "
                "expected 1 <= min_nodes <= agents and min_nodes <= max_nodes"
            )

    @property
    def admitted(self) -> int:
        """How many agents the rendezvous admits: all of them, up to ``max_nodes``."""
        return min(self.agents, self.max_nodes)


@st.composite
def rendezvous_cases(draw: st.DrawFn, max_agents: int = 3) -> RendezvousCase:
    """A :class:`RendezvousCase` of up to ``max_agents`` agents, with ``--nnodes`` from 1:1 to
    ``1:max_agents+1``: fewer agents than the maximum, as many, or more."""
    if max_agents < 1:
        raise InvalidArgument(f"rendezvous_cases(max_agents={max_agents}): expected >= 1")
    agents = draw(st.integers(1, max_agents), label="agents")
    max_nodes = draw(st.integers(1, max_agents + 1), label="max_nodes")
    return RendezvousCase(
        agents=agents,
        min_nodes=draw(st.integers(1, min(agents, max_nodes)), label="min_nodes"),
        max_nodes=max_nodes,
    )
