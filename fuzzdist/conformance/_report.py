"""What a conformance check found: per operation, supported, unsupported, or failed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fuzzdist.errors import RankError, RankFailure

_MAX_MESSAGE = 6000
# An exception counts as "the backend does not implement this" (not a bug) when it is a
# NotImplementedError, or a RuntimeError/ValueError/TypeError whose message says so.
UNSUPPORTED_PATTERNS: tuple[str, ...] = (
    "not supported",
    "unsupported",
    "not implemented",
    "notimplemented",
    "does not support",
    "doesn't support",
    "no backend type associated with device type",  # a Python ProcessGroup without this method
    "invalid scalar type",  # gloo's dtype dispatch
    "cannot use reduceop",  # gloo: a bitwise ReduceOp on floats, ...
)
_UNSUPPORTED_TYPES = (
    "builtins.RuntimeError",
    "builtins.ValueError",
    "builtins.TypeError",
    "torch.distributed.DistBackendError",
    "torch.distributed.DistError",
)


def unsupported_reason(type_name: str, message: str, method: str | None = None) -> str | None:
    """Why an exception means "not implemented" (a short reason), or None if it is a failure."""
    first = (message.strip().splitlines() or [""])[0].strip()
    short = type_name.rsplit(".", 1)[-1]
    if type_name in ("builtins.NotImplementedError",) or short == "NotImplementedError":
        return f"NotImplementedError: {first}" if first else "NotImplementedError"
    lowered = message.lower()
    if (type_name in _UNSUPPORTED_TYPES or short.endswith("Error")) and any(p in lowered for p in UNSUPPORTED_PATTERNS):
        if "no backend type associated" in lowered and method:
            return (
                f"the group does not implement {method}() (ProcessGroup's own {method} found no "
                f"backend for the device: {first})"
            )
        return f"{short}: {first}"
    return None


@dataclass
class Unsupported:
    """An operation (with a reduce op, or a layout) the backend refused for some dtypes."""

    op: str
    variant: str | None  # "ReduceOp.SUM", "layout=transposed", or None
    dtypes: tuple[str, ...]  # () when it does not depend on the dtype
    world_sizes: tuple[int, ...]
    reason: str

    def __str__(self) -> str:
        what = self.op + (f" {self.variant}" if self.variant else "")
        dtypes = f" for {', '.join(d.replace('torch.', '') for d in self.dtypes)}" if self.dtypes else ""
        sizes = f" (world size {', '.join(map(str, self.world_sizes))})"
        return f"{what}{dtypes}{sizes}: {self.reason}"


@dataclass
class Failure:
    """A conformance failure, shrunk by Hypothesis to a minimal example.

    ``example`` holds the example's fields (``world_size`` and ``call``, or
    ``calls`` and ``wait_order`` for the async check, ``config`` for DDP);
    ``message`` names the operation, its arguments, the expected and the
    actual values; ``exception`` is the failure itself (a ``ConformanceFailure``
    carries its :class:`~fuzzdist.problems.Problem` records), where there is one.
    """

    op: str
    message: str
    example: dict[str, Any] = field(default_factory=dict)
    exception: BaseException | None = field(default=None, repr=False)
    flaky: bool = False

    @property
    def world_size(self) -> int | None:
        return self.example.get("world_size")

    @property
    def call(self) -> Any:
        return self.example.get("call")

    def __str__(self) -> str:
        return self.message


@dataclass
class OpReport:
    """One operation's outcome.

    ``status``: "conforms" (every example passed), "failed", "unsupported"
    (the backend implements it for no dtype or world size), "not applicable"
    (e.g. send/recv with one rank), "skipped" (with ``note``), "interrupted" (SIGINT/SIGTERM cut it
    short before it found anything) or "not run";
    "known" where every example passed but for sightings of known torch bugs
    (``known``: ``fuzzdist.known_bugs.Tally.as_json()``, counted, neither
    failures nor passes).  ``supported`` lists the variants fuzzed
    ("ReduceOp.SUM: float32, ..."), ``unsupported`` what was refused,
    ``examples`` how many examples ran, ``world_sizes`` the world sizes they ran at.
    """

    op: str
    status: str = "not run"
    method: str = ""
    examples: int = 0
    world_sizes: list[int] = field(default_factory=list)
    supported: list[str] = field(default_factory=list)
    unsupported: list[Unsupported] = field(default_factory=list)
    failure: Failure | None = None
    note: str = ""
    known: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ConformanceReport:
    """What ``check_process_group`` found, operation by operation (``ops``)."""

    factory: str
    world_sizes: tuple[int, ...]
    backend: str = ""
    ops: dict[str, OpReport] = field(default_factory=dict)
    factory_errors: dict[int, str] = field(default_factory=dict)  # world size -> why the factory failed
    duration_s: float = 0.0
    probe_s: float = 0.0  # building the group and probing it, every world size together
    interrupted: str = ""  # the signal that cut the run short ("SIGTERM"): the report is partial

    @property
    def failures(self) -> list[Failure]:
        found = [
            Failure("factory", f"world size {w}: {msg}", {"world_size": w})
            for w, msg in sorted(self.factory_errors.items())
        ]
        return found + [r.failure for r in self.ops.values() if r.failure is not None]

    @property
    def unsupported(self) -> list[Unsupported]:
        return [u for r in self.ops.values() for u in r.unsupported]

    @property
    def supported(self) -> list[str]:
        """Operations that ran and passed for at least one variant (known torch bugs' sightings aside)."""
        return [name for name, r in self.ops.items() if r.status in ("conforms", "known")]

    @property
    def conforms(self) -> bool:
        """No failure (unsupported operations and known torch bugs' sightings do not count against it)."""
        return not self.failures

    @property
    def known_sightings(self) -> int:
        """Sightings of known torch bugs, every operation together."""
        return sum(k["count"] for r in self.ops.values() for k in r.known)

    def summary(self, *, details: bool = True) -> str:
        lines = [
            f"fuzzdist check-pg {self.factory} ({self.backend or 'unknown backend'}), world sizes "
            f"{', '.join(map(str, self.world_sizes))}: "
            + (
                f"{len(self.failures)} FAILURE(S)"
                if not self.conforms
                else "NO FAILURE SO FAR"
                if self.interrupted
                else "CONFORMS"
            )
            + (f", {self.known_sightings} sighting(s) of known torch bugs" if self.known_sightings else "")
            + f" in {self.duration_s:.1f} s"
            + (f" (building and probing the group: {self.probe_s:.1f} s)" if self.probe_s else "")
        ]
        if self.interrupted:
            lines.append(f"  INTERRUPTED by {self.interrupted}: a partial report; the checks not run say so")
        for w, msg in sorted(self.factory_errors.items()):
            # its first lines; the whole message, tracebacks and all, once below as the FAILURE in factory
            head = "\n".join(msg.splitlines()[:2])
            lines.append(f"  factory failed at world size {w}: {_indent(head, 4).lstrip()}")
        width = max((len(n) for n in self.ops), default=0)
        for name, r in self.ops.items():
            extra = f"{r.examples} examples" if r.examples else ""
            if r.world_sizes and tuple(r.world_sizes) != self.world_sizes:  # say which, when not all
                extra += f" at world size{'s' if len(r.world_sizes) > 1 else ''} {', '.join(map(str, r.world_sizes))}"
            if r.note:
                extra = f"{extra}; {r.note}" if extra else r.note
            lines.append(f"  {name:<{width}}  {r.status:<14} {extra}".rstrip())
            for k in r.known:
                upstream = f" ({k['upstream']})" if k["upstream"] else ""
                inherited = (
                    f" (inherited from {k['inherited_from']}: {k['inherited_from']} itself gives the same result)"
                    if k.get("inherited_from")
                    else ""
                )
                kind = f" [{k['kind']}]" if k.get("kind") else ""  # the entry's kind, as every KNOWN line shows it
                lines.append(f"    KNOWN {k['id']} x{k['count']}{inherited}{kind}: {k['summary']}{upstream}")
                if details:
                    lines.append(f"      first seen on: {k['example']}")
        unsupported = self.unsupported
        if unsupported and details:
            lines.append("unsupported (reported once each, not failures):")
            lines.extend(f"  {u}" for u in unsupported)
        for failure in self.failures:
            lines.append(f"FAILURE in {failure.op}" + (" (flaky)" if failure.flaky else "") + ":")
            lines.append(_indent(failure.message, 2))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (``fuzzdist check-pg --json``)."""
        return {
            "factory": self.factory,
            "backend": self.backend,
            "world_sizes": list(self.world_sizes),
            "conforms": self.conforms,
            "known_sightings": self.known_sightings,
            "duration_s": round(self.duration_s, 3),
            "probe_s": round(self.probe_s, 3),
            "interrupted": self.interrupted or None,
            "factory_errors": {str(w): msg for w, msg in self.factory_errors.items()},
            "ops": {
                name: {
                    "status": r.status,
                    "method": r.method,
                    "examples": r.examples,
                    "world_sizes": r.world_sizes,
                    "supported": r.supported,
                    "unsupported": [str(u) for u in r.unsupported],
                    "failure": None if r.failure is None else r.failure.message,
                    "note": r.note,
                    "known": r.known,
                }
                for name, r in self.ops.items()
            },
        }


def _indent(text: str, n: int) -> str:
    pad = " " * n
    return "\n".join(pad + line for line in text.splitlines())


def dtype_name(dtype: Any) -> str:
    return re.sub(r"^torch\.", "", str(dtype))


def with_hint(message: str, hint: str) -> str:
    """A failure's ``message`` with ``hint`` (what the failure resembles, and what to do) as its last line."""
    return f"{message}\n  hint: {hint}" if hint else message


def failure_text(exc: BaseException) -> str:
    """An exception's message for a report, cut at ``_MAX_MESSAGE`` characters."""
    text = str(exc)
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + "\n... (truncated)"


def rank_exceptions(exc: RankFailure) -> list[tuple[int, str, str]]:
    """(rank, exception type, message) of each failed rank, lowest rank first."""
    if isinstance(exc, RankError):
        return [(r, exc.exc_types[r], str(exc.exceptions[r])) for r in sorted(exc.exceptions)]
    return []


def raised_message(head: str, exc: RankFailure) -> str:
    """The message of an example that raised on the ranks, ``head`` saying what it called."""
    lines = [head.replace(" does not conform:", " raised:", 1)]
    refusals = [(r, unsupported_reason(t, m)) for r, t, m in rank_exceptions(exc)]
    if any(reason for _, reason in refusals):
        lines.append(
            "  (it refused these arguments as unsupported, but the probe found the operation "
            "and dtype supported: a backend must accept every shape, layout and root)"
        )
    lines.append(failure_text(exc))
    return "\n".join(lines)
