"""Object collectives: ``broadcast_object_list``, ``all_gather_object``, ``scatter_object_list`` and
``gather_object`` hand every rank objects equal to the ones their source ranks passed in.

Objects are drawn picklable trees: nested lists, dicts and tuples of None, bools, ints far beyond
64 bits, floats (NaN and -0.0 included, compared by their bits), strings and bytes (some of them
large, up to 256 KiB, built on the ranks from a size and a seed) and tensors of every dtype the
installed torch can hold, contiguous or not.  Tensors are compared by dtype, shape and values,
bitwise (NaN payloads included), never by identity; their strides are not compared (pickling may
keep or drop them).  Expected objects are rebuilt on every rank from the drawn description, never
taken from the collective.

The uint16/uint32/uint64/float8 tensors torch 2.13 pickles but can't unpickle are drawn like any
other: the check runs inside :func:`fuzzdist.known_bugs.known_failures`, which reports that
failure as the known bug ``wide-unsigned-unpickle-objects`` (in ``known_bugs.py next to it``) and any other
failure as new.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties._results import fail_on_ranks_with_problems
from fuzzdist.toolkit.checks import first_difference

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

OPS = ("broadcast_object_list", "all_gather_object", "scatter_object_list", "gather_object")
MAX_TENSOR_BYTES = 4096
MAX_LARGE_BYTES = 256 * 1024
SEEDS = fst.seeds()


@dataclass(frozen=True)
class Large:
    """A large ``bytes`` (``kind="bytes"``) or ``str`` (``kind="str"``) of ``size`` items, built from ``seed``."""

    kind: str
    size: int
    seed: int


@dataclass(frozen=True)
class Tensor:
    """A tensor leaf: ``spec.materialize("cpu", seed)``."""

    spec: fst.TensorSpec
    seed: int


@dataclass(frozen=True)
class ObjectCase:
    """One example: ``op`` with root ``root`` (the source of broadcast/scatter, the destination of gather);
    ``objects[r]`` is what rank ``r`` passes in (for broadcast and scatter only the root's counts:
    ``objects[root]`` is then the list it sends, one object per entry)."""

    op: str
    root: int
    objects: tuple[Any, ...]

    def dtypes_received(self, rank: int, world: int) -> set[str]:
        """The dtypes (``"uint16"``, ...) of the tensors ``rank`` unpickles: in the objects that travel to it
        (``wide-unsigned-unpickle-objects``'s predicate reads them)."""
        return set().union(set(), *(_dtypes_in(obj) for obj in _unpickled_on(self, rank, world)))


# ---------------------------------------------------------------------------
# building and comparing objects (on the ranks)


def build(desc: Any, device: torch.device | str = "cpu") -> Any:
    """The object ``desc`` describes: ``Large`` and ``Tensor`` leaves built, containers rebuilt."""
    if isinstance(desc, Tensor):
        return desc.spec.materialize(device, desc.seed)
    if isinstance(desc, Large):
        rng = random.Random(desc.seed)
        data = rng.randbytes(desc.size)
        return data if desc.kind == "bytes" else data.decode("latin-1")
    if isinstance(desc, list):
        return [build(x, device) for x in desc]
    if isinstance(desc, tuple):
        return tuple(build(x, device) for x in desc)
    if isinstance(desc, dict):
        return {k: build(v, device) for k, v in desc.items()}
    return desc


def difference(actual: Any, expected: Any, path: str = "obj") -> str | None:
    """None if ``actual`` equals ``expected`` (types exact, floats and tensors bitwise), else where and how not."""
    if type(actual) is not type(expected):
        return f"{path}: got a {type(actual).__name__}, expected a {type(expected).__name__}"
    if isinstance(expected, torch.Tensor):
        problem = first_difference(actual, expected)
        return None if problem is None else f"{path}: {problem}"
    if isinstance(expected, float):
        same = struct.pack("<d", actual) == struct.pack("<d", expected)
        return None if same else f"{path}: got {actual!r}, expected {expected!r}"
    if isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            return f"{path}: got {len(actual)} items, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            diff = difference(a, e, f"{path}[{i}]")
            if diff is not None:
                return diff
        return None
    if isinstance(expected, dict):
        if list(actual) != list(expected):
            return f"{path}: got keys {list(actual)!r}, expected {list(expected)!r}"
        for k in expected:
            diff = difference(actual[k], expected[k], f"{path}[{k!r}]")
            if diff is not None:
                return diff
        return None
    if actual != expected:
        shown = repr(actual) if len(repr(actual)) < 80 else f"{type(actual).__name__} of length {len(actual)}"
        return f"{path}: got {shown}, expected another value"
    return None


def _default_ops() -> dict[str, Callable[..., Any]]:
    return {op: getattr(dist, op) for op in OPS}


def object_collective_and_check(
    ctx: RankContext, case: ObjectCase, ops: dict[str, Callable[..., Any]] | None = None
) -> list[Problem] | None:
    """On every rank: run ``case.op`` with this rank's objects; None if it received what it should have,
    else what differs (or the error it raised: unpickling happens after the collective, so a rank that
    raises does not leave its peers waiting).  ``ops`` maps op names to stand-ins, for planted bugs."""
    fn = (ops or _default_ops())[case.op]
    rank, world, root = ctx.rank, ctx.world_size, case.root
    expected_all = [build(case.objects[r]) for r in range(world)]  # built before the collective
    mine = build(case.objects[rank])
    problems: list[Problem] = []
    try:
        if case.op == "broadcast_object_list":
            got = mine if rank == root else [None] * len(case.objects[root])
            fn(got, src=root, group=ctx.group)
            expected: Any = expected_all[root]
        elif case.op == "all_gather_object":
            got = [None] * world
            fn(got, mine, group=ctx.group)
            expected = expected_all
        elif case.op == "scatter_object_list":
            out: list[Any] = [None]
            fn(out, mine if rank == root else None, src=root, group=ctx.group)
            got, expected = out[0], expected_all[root][rank]
        else:  # gather_object
            got = [None] * world if rank == root else None
            fn(mine, got, dst=root, group=ctx.group)
            expected = expected_all if rank == root else None
    except Exception as exc:  # noqa: BLE001 - an observation, reported by the driver
        return [Problem.raised(exc, op=case.op)]
    diff = difference(got, expected)
    if diff is not None:
        problems.append(Problem(Kind.MISMATCH, op=case.op, detail=diff))
    return problems or None


# ---------------------------------------------------------------------------
# strategies


def _leaves() -> st.SearchStrategy[Any]:
    tensors = st.builds(Tensor, fst.tensor_specs(max_bytes=MAX_TENSOR_BYTES), SEEDS)
    large = st.builds(Large, st.sampled_from(["bytes", "str"]), st.integers(0, MAX_LARGE_BYTES), SEEDS)
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**200), 2**200),
        st.floats(allow_nan=True),
        st.text(max_size=20),
        st.binary(max_size=20),
        tensors,
        large,
    )


def objects() -> st.SearchStrategy[Any]:
    """Descriptions of picklable trees (lists, dicts with str/int keys, tuples) of the leaves above.
    Shrinks to ``None``."""
    keys = st.one_of(st.text(max_size=5), st.integers(-5, 5))
    return st.recursive(
        _leaves(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.tuples(inner, inner), st.dictionaries(keys, inner, max_size=3)
        ),
        max_leaves=6,
    )


@st.composite
def object_cases(draw: st.DrawFn, world_size: int, op: st.SearchStrategy[str] | None = None) -> ObjectCase:
    """An ObjectCase for ``world_size`` ranks; shrinks to broadcast_object_list of ``[None]`` from rank 0."""
    name = draw(st.sampled_from(OPS) if op is None else op, label="op")
    root = draw(fst.source_ranks(world_size), label="root")
    per_rank: list[Any]
    if name == "broadcast_object_list":
        per_rank = [draw(st.lists(objects(), min_size=1, max_size=3)) for _ in range(world_size)]
    elif name == "scatter_object_list":
        per_rank = [
            draw(st.lists(objects(), min_size=world_size, max_size=world_size)) if r == root else None
            for r in range(world_size)
        ]
    else:
        per_rank = [draw(objects()) for _ in range(world_size)]
    return ObjectCase(name, root, tuple(per_rank))


# ---------------------------------------------------------------------------
# the known bug (its entry is in known_bugs.py next to it), and the driver-side check


def _dtypes_in(desc: Any) -> set[str]:
    if isinstance(desc, Tensor):
        return {str(desc.spec.dtype).removeprefix("torch.")}
    if isinstance(desc, dict):
        desc = list(desc.values())
    if isinstance(desc, (list, tuple)):
        return set().union(*(_dtypes_in(x) for x in desc)) if desc else set()
    return set()


def _unpickled_on(case: ObjectCase, rank: int, world: int) -> list[Any]:
    """The objects ``rank`` unpickles in ``case``: the ones that travel to it."""
    if case.op == "broadcast_object_list":
        return [] if rank == case.root else [case.objects[case.root]]
    if case.op == "scatter_object_list":
        sent = case.objects[case.root]
        return [sent[rank]] if isinstance(sent, (list, tuple)) and rank < len(sent) else []
    if case.op == "gather_object" and rank != case.root:
        return []
    return list(case.objects[:world])  # all_gather_object everywhere, gather_object on the root


def check(pool: Pool, case: ObjectCase, *, ops: dict[str, Callable[..., Any]] | None = None) -> None:
    """Run ``case`` over ``pool`` (torch's object collectives, or the stand-ins in ``ops``); raise
    :class:`PropertyFailure` naming the ranks that received something other than the source's objects.
    A failure that is the known wide-unsigned unpickling bug is reported as known (see the module doc)."""
    with known_failures("object_collectives", case=case):
        results = pool.run(object_collective_and_check, case, ops=ops)
        fail_on_ranks_with_problems(
            results, f"did not get the objects rank {case.root}'s {case.op} should have handed them"
        )


__all__ = [
    "OPS",
    "Large",
    "ObjectCase",
    "Tensor",
    "build",
    "check",
    "difference",
    "object_cases",
    "objects",
    "object_collective_and_check",
]
