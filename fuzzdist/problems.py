"""What a check found wrong, as data: one :class:`Problem` record, and the one place that words it.

A property's rank function, a comparison helper (:func:`fuzzdist.toolkit.checks.first_difference`,
:mod:`fuzzdist.toolkit.oracle`) or a check-pg operation returns a :class:`Problem` for each thing it
found wrong.  People read it through :func:`describe` (``str(problem)`` calls it); known-bug predicates
(:mod:`fuzzdist.known_bugs`) read its fields, never its words, so rewording a message can't change what
is reported as a known bug.  Where a wrong result is exactly what a known wrong computation gives (a
write that ignores strides, the forward's op over the gradients...), the check says so in
:attr:`Problem.symptom`, a :class:`Symptom`.

A leaf module next to :mod:`fuzzdist.errors`: every layer may import it.  Records pickle (they travel
from the ranks to the driver) and compare by value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["Kind", "Problem", "Symptom", "by_rank", "describe", "flatten", "listed"]


class Kind(str, Enum):
    """What sort of problem a check found."""

    MISMATCH = "mismatch"
    """Values differ from the expected ones (bitwise, or beyond :attr:`Problem.bound`)."""
    SHAPE = "shape"
    """The shape or dtype (or placement, layout) differs from the expected one."""
    RAISED = "raised"
    """A call raised (:attr:`Problem.error` is the exception's type)."""
    HANG = "hang"
    """A call did not return in time, or left peers waiting (a skipped collective)."""
    MISSING = "missing"
    """Something expected is absent (an output, a gradient, a key)."""
    NOTE = "note"
    """Anything else, said in :attr:`Problem.detail` alone."""
    MORE = "more"
    """Stands for :attr:`Problem.count` further problems left out of a report (see ``capped``)."""


class Symptom(str, Enum):
    """A wrong result that is exactly what a known wrong computation gives: the check computed that wrong
    result too and found it equal.  The value is the words :func:`describe` adds."""

    MEMORY_ORDER = "holds the source's elements in the order of its memory: strides ignored"
    """A receiver holds the source's elements in the order of the source's memory."""
    STRIDES_IGNORED = "exactly what a write that ignores the output's strides leaves"
    """A result equals what a row-major write into the output's memory leaves."""
    FORWARD_OP_ON_GRADS = "exactly the forward's op over the upstream gradients"
    """An input gradient equals the forward's reduction over the upstream gradients."""
    SUM_GRAD_FOR_ANY_OP = "exactly SUM's gradient: the forward's op ignored"
    """An input gradient equals SUM's, whatever the forward's op."""
    BOOL_BYTES_NOT_0_OR_1 = "hold a byte other than 0 and 1"
    """bools right by truth value that hold other bytes."""
    MESH_SORTED_ORDER = "exactly what the dimension's ranks in ascending order give"
    """On a mesh dimension whose ranks are not ascending, the result of the ascending order."""
    EVEN_SHARDS_ASSUMED = "exactly the shape of this rank's piece as if every rank's were as large"
    """A sharded result's global shape equals this rank's local shape times the ranks on its sharded dimension,
    where the pieces are uneven."""
    IMPLICIT_ONES = "equals backward from this stage's output with a gradient of ones"
    """A stage gradient equals backward from the stage's own output with a gradient of ones."""
    STALE_SHARD = "equals the joined owner's shard stepped with its own gradients"
    """A parameter equals the joined owner's shard stepped with its own stale gradients."""
    FLOAT32_ROUND_TRIP = "exactly a float32 round trip of the original"
    """A gathered value equals the original rounded to float32 and back."""
    GATHER_SKIPPED = "returned from the gather without joining its collective"
    """A rank returned from a gather without joining its collective."""
    REFUSED_UNCLEARLY = "was refused, but the error does not say why"
    """A call was refused with an error that doesn't say what is wrong."""
    REPEAT_WAIT_BLOCKED = "a repeated wait() on a Work that had completed did not return"
    """A second wait() on a completed Work blocked."""
    RANKS_DIFFER = "differ from rank 0's bitwise"
    """Values that every rank must hold alike differ across the ranks."""


@dataclass(frozen=True, repr=False)
class Problem:
    """One thing a check found wrong.

    ``kind`` what sort (:class:`Kind`); ``what`` which output, gradient, parameter or call, in the
    check's words ("output", "grad of input", "param fc.weight after step 2"); ``rank`` the rank that
    saw it (None: the whole example); ``index`` the flat index of the first (or worst) wrong element,
    ``got`` and ``expected`` its values there, or the whole values (a shape, a placement); ``bound`` the
    tolerance it was compared within (None: bitwise); ``count`` of ``size`` elements wrong; ``symptom``
    the known wrong computation the result equals; ``hint`` what to do or where to look; ``call`` and
    ``op`` the call of a sequence it is about; ``error`` the type a :attr:`Kind.RAISED` call raised
    (``error_types`` the qualified names of its classes), ``error_text`` its message, ``trace`` its
    traceback (or a waiting rank's stack); ``inputs`` every rank's input at flat index ``inputs_at`` (a reduction's:
    the first wrong element's), and
    ``detail`` anything more, in words, for people only: predicates never read it.
    """

    kind: Kind
    what: str = ""
    rank: int | None = None
    index: int | None = None
    got: Any = None
    expected: Any = None
    bound: float | None = None
    count: int | None = None
    size: int | None = None
    symptom: Symptom | None = None
    hint: str = ""
    call: int | None = None
    op: str | None = None
    error: str | None = None
    error_types: tuple[str, ...] = ()
    error_text: str = ""
    trace: str = ""
    inputs: tuple[Any, ...] = ()
    inputs_at: int | None = None
    subject: tuple[Any, ...] = ()
    """What the problem is about, as data, where ``what``'s words hold more than the fields above (a
    message's peer and tag)."""
    detail: str = ""
    worst: bool = False
    """``index`` is the worst element (largest difference), not the first."""
    unit: str = "element"
    """What ``count`` and ``size`` count ("element", "real-view element")."""

    def __str__(self) -> str:
        return describe(self)

    def __repr__(self) -> str:
        # What an assertion over a rank's results shows (``assert results == [None, None]``): the words,
        # not two dozen fields; the fields are a ``dataclasses.asdict(problem)`` away.
        return f"Problem({describe(self)!r})"

    @classmethod
    def raised(cls, exc: BaseException, what: str = "", **more: Any) -> Problem:
        """The record of ``exc``, raised by what ``what`` names: its type (and its classes' qualified names)
        and its message's first line."""
        kind = type(exc)
        return cls(
            Kind.RAISED,
            what,
            error=kind.__name__,
            error_types=tuple(f"{c.__module__}.{c.__qualname__}" for c in kind.__mro__),
            error_text=(str(exc).splitlines() or [""])[0][:300],
            **more,
        )

    def with_symptom(self, symptom: Symptom) -> Problem:
        """This problem, found to be exactly ``symptom``'s wrong computation."""
        from dataclasses import replace

        return replace(self, symptom=symptom)

    def about(self, what: str, **more: Any) -> Problem:
        """This problem, said of ``what`` (and with ``more`` fields set)."""
        from dataclasses import replace

        return replace(self, what=what, **more)


def _value(value: Any) -> str:
    """A value as a problem shows it: its repr (a complex one as ``(1.0+2.0j)``, NaN parts kept)."""
    if isinstance(value, complex):
        sign = "+" if value.imag >= 0 or math.isnan(value.imag) else "-"
        return f"({value.real!r}{sign}{abs(value.imag)!r}j)"
    return repr(value)


def _mismatch(p: Problem) -> str:
    """A :attr:`Kind.MISMATCH` problem's words: how many elements, the first (or worst) one's values."""
    if p.symptom is Symptom.BOOL_BYTES_NOT_0_OR_1:  # right by truth value: the bytes are what is wrong
        return f"{p.count} of {p.size} bools {p.symptom.value} (bytes {list(p.got)}; True is the byte 1)"
    head = f"{p.count} of {p.size} {p.unit}s differ; " if p.count is not None else ""
    if p.index is None:
        if p.got is None and p.expected is None:  # the detail says how
            return head.removesuffix("; ")
        return f"{head}got {_value(p.got)}, expected {_value(p.expected)}"
    if p.bound is not None:
        values = f"got {p.got:.9g}, expected {p.expected:.9g} within {p.bound:.3g}"
    else:
        values = f"got {_value(p.got)}, expected {_value(p.expected)}"
    return f"{head}{'worst' if p.worst else 'first'} at flat index {p.index}: {values}"


def _first_line(p: Problem) -> str:
    """The problem's first line, without its ``what``."""
    if p.kind is Kind.MISMATCH:
        text = _mismatch(p)
    elif p.kind is Kind.SHAPE:
        text = f"got shape {_shape(p.got)}, expected {_shape(p.expected)}"
    elif p.kind is Kind.RAISED:
        text = f"raised {p.error}: {p.error_text}" if p.error else "raised"
    elif p.kind is Kind.MORE:
        text = f"... and {p.count} more"
    else:
        text = ""
    first = p.detail.partition("\n")[0]  # the rest of a multi-line detail goes under the problem
    if first:
        text = f"{text} {first}" if text else first
    if p.symptom is not None and p.symptom is not Symptom.BOOL_BYTES_NOT_0_OR_1:
        text += f" ({p.symptom.value})"
    if p.hint:
        text += f" [{p.hint}]"
    return text


def _shape(value: Any) -> str:
    """A (shape, dtype) pair as ``(2, 3) torch.float32``; anything else as it prints."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple):
        return f"{value[0]} {value[1]}"
    return str(value)


def describe(problem: Problem) -> str:
    """``problem`` in words: what it is about, then what is wrong; every rank's input at the wrong index
    and a multi-line ``detail`` on the lines below (the one formatter)."""
    body = _first_line(problem)
    call = f"call {problem.call} {problem.op}" if problem.call is not None and problem.op else problem.op or ""
    rank = f"rank {problem.rank}" if problem.rank is not None else ""
    what = ", ".join(part for part in (call, rank, problem.what) if part)
    text = f"{what}: {body}" if what and body else what or body
    if problem.inputs:
        text += f"\n      inputs at index {problem.inputs_at}: " + ", ".join(
            f"rank {r}: {_value(v)}" for r, v in enumerate(problem.inputs)
        )
    if "\n" in problem.detail:
        text += "\n" + problem.detail.partition("\n")[2]
    return text


def flatten(results: Iterable[Any]) -> list[Problem]:
    """Every :class:`Problem` in rank functions' results (each a Problem, a list of them, or None)."""
    out: list[Problem] = []
    for result in results:
        if isinstance(result, Problem):
            out.append(result)
        elif isinstance(result, (list, tuple)):
            out.extend(p for p in result if isinstance(p, Problem))
    return out


def listed(problems: Sequence[Problem]) -> str:
    """Problems on their own lines, for a failure's message."""
    return "".join(f"\n  {describe(problem)}" for problem in problems)


def by_rank(problems: Mapping[int, Problem | Sequence[Problem]]) -> str:
    """Each rank's problems on their own lines, for a failure's message."""
    lines = []
    for rank in sorted(problems):
        found = problems[rank]
        for problem in [found] if isinstance(found, Problem) else found:
            lines.append(f"\n  rank {rank}: {describe(problem)}")
    return "".join(lines)
