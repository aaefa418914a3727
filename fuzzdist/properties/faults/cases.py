"""What one fault example draws: ``FaultCase`` (the world, the victim, where and how it dies) and the
``fault_cases`` strategy, shrinking towards two ranks, rank 0's death by ``os._exit(1)`` before an
``all_reduce`` of one element, with a one-second timeout."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from fuzzdist.errors import InvalidArgument

POINTS = ("before", "during", "after", "ddp_backward", "dcp_save")
"""Where the victim dies: before, during (its Work in flight) or after a drawn collective; in the hook of a
parameter's gradient inside DDP's backward; inside ``dcp.save`` (at ``dcp_stage``)."""

COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_to_all", "barrier")
"""The collectives a victim dies around (for the other points the drawn one is not run)."""

DCP_STAGES = ("plan", "write", "written", "finish")
"""Where in ``dcp.save`` the victim dies: in its storage writer's ``prepare_local_plan``, at the start of
``write_data``, once ``write_data``'s files are on disk, or in ``finish`` (which only the coordinator, rank
0, calls: another victim dies right after ``dcp.save`` returns)."""

DEATHS = ("exit", "sigkill")
"""How the victim dies: ``os._exit(exit_code)`` or SIGKILL sent to itself (no clean-up either way)."""

TIMEOUTS_S = (1.0, 2.0, 3.0)
"""The group's drawn ``timeout``: small, so that a survivor left waiting must give up within seconds."""

GRACE_S = 5.0
"""What a survivor's error may take beyond the group's timeout: the machine's load (process starts,
other jobs on the same cores), not torch's slack; a survivor left waiting is caught by the bound anyway."""

FRESH_TIMEOUT_S = 30.0
"""The fresh group's timeout: it has no victim, so it is a bound on a hang, not part of the contract."""

START_S = 60.0
"""What starting the processes and joining the first group may take on a loaded machine."""


@dataclass(frozen=True)
class FaultCase:
    """One fault: ``world_size`` ranks over gloo with ``timeout_s``, of which ``victim`` dies at ``point``
    (``collective`` of ``numel`` float32 elements rooted at ``root``; ``dcp_stage`` inside a DCP save) by
    ``death`` (``os._exit(exit_code)`` or SIGKILL)."""

    world_size: int = 2
    victim: int = 0
    point: str = "before"
    collective: str = "all_reduce"
    root: int = 0
    numel: int = 1
    dcp_stage: str = "plan"
    death: str = "exit"
    exit_code: int = 1
    timeout_s: float = 1.0

    def __post_init__(self) -> None:
        if self.world_size < 2:
            raise InvalidArgument(f"FaultCase(world_size={self.world_size}): a fault needs a survivor; use 2 or more")
        for name, value, allowed in (
            ("point", self.point, POINTS),
            ("collective", self.collective, COLLECTIVES),
            ("dcp_stage", self.dcp_stage, DCP_STAGES),
            ("death", self.death, DEATHS),
        ):
            if value not in allowed:
                raise InvalidArgument(f"FaultCase({name}={value!r}): expected one of {', '.join(allowed)}")
        for name, rank in (("victim", self.victim), ("root", self.root)):
            if not 0 <= rank < self.world_size:
                raise InvalidArgument(f"FaultCase({name}={rank}): expected a rank in [0, {self.world_size})")
        if self.numel < 1 or not 1 <= self.exit_code <= 255 or self.timeout_s <= 0:
            raise InvalidArgument(
                f"FaultCase(numel={self.numel}, exit_code={self.exit_code}, timeout_s={self.timeout_s}): "
                "expected numel >= 1, an exit code in [1, 255] and a positive timeout"
            )

    @property
    def survivors(self) -> tuple[int, ...]:
        """The ranks that do not die, in order: their index is their rank in the fresh group."""
        return tuple(r for r in range(self.world_size) if r != self.victim)


@st.composite
def fault_cases(draw: st.DrawFn, world_sizes: tuple[int, ...] = (2, 3)) -> FaultCase:
    """A :class:`FaultCase` over one of ``world_sizes``; the fields a point does not read stay at their
    defaults, so that a failure shrinks to what it depends on."""
    if not world_sizes or min(world_sizes) < 2:
        raise InvalidArgument(f"fault_cases(world_sizes={world_sizes!r}): expected sizes of 2 ranks or more")
    world_size = draw(st.sampled_from(world_sizes), label="world_size")
    point = draw(st.sampled_from(POINTS), label="point")
    fields: dict[str, object] = {}
    if point in ("before", "during", "after"):
        fields["collective"] = draw(st.sampled_from(COLLECTIVES), label="collective")
        if fields["collective"] == "broadcast":
            fields["root"] = draw(st.integers(0, world_size - 1), label="root")
        if fields["collective"] != "barrier":
            fields["numel"] = draw(st.integers(1, 4096), label="numel")
    if point == "dcp_save":
        fields["dcp_stage"] = draw(st.sampled_from(DCP_STAGES), label="dcp_stage")
    death = draw(st.sampled_from(DEATHS), label="death")
    return FaultCase(
        world_size=world_size,
        victim=draw(st.integers(0, world_size - 1), label="victim"),
        point=point,
        death=death,
        exit_code=draw(st.integers(1, 255), label="exit_code") if death == "exit" else 1,
        timeout_s=draw(st.sampled_from(TIMEOUTS_S), label="timeout_s"),
        **fields,  # type: ignore[arg-type]
    )


def world_deadline_s(case: FaultCase) -> float:
    """The longest one example may run: the start, two operations that may each wait out the group's
    timeout (plus :data:`GRACE_S`), and the fresh group with a DCP load."""
    return START_S + 3 * (case.timeout_s + GRACE_S) + 2 * FRESH_TIMEOUT_S
