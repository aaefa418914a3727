"""Subgroups: collectives on ``dist.new_group`` and ``DeviceMesh`` subgroups over drawn rank subsets
give each member what an independent reference computed from the members' drawn inputs says, in the
group's rank order, and leave the ranks outside the group untouched.

An example creates one or two groups (on every rank, first thing, as ``new_group`` requires), then
runs a drawn sequence of ``all_reduce`` (SUM, MAX, MIN), ``broadcast`` (from a drawn group rank) and
``all_gather`` on each.  A group is either

* ``new_group(ranks)`` with the ranks in a drawn order, ``sort_ranks`` drawn where torch has it
  (group rank ``i`` is ``sorted(ranks)[i]``, or ``ranks[i]`` with ``sort_ranks=False``) and, only
  where asked (``subgroup_cases(..., local_sync=True)``; off by default, see there),
  ``use_local_synchronization`` drawn for the example's first group (torch documents that several
  locally synchronised groups that overlap can deadlock); ranks outside the group call its
  all_reduce and all_gather too (torch returns at once) and must find their tensors unchanged
  (not its broadcast: torch checks ``src`` against the group before it checks membership, so
  there it raises ValueError); or
* a 1-D or 2-D ``DeviceMesh`` over a drawn permutation of a drawn subset: for every mesh dimension,
  ``get_coordinate()`` and ``get_local_rank(d)`` are this rank's position in the drawn mesh, and
  collectives on ``get_group(d)`` follow the mesh's order along that dimension.

Singleton groups, the whole world, and the same ranks twice in another order are all drawn.  The
groups are destroyed after the example by the rank's isolation (``fuzzdist.pool.rank.isolation``).

Four torch bugs show here (their entries are in ``known_bugs.py next to it``): re-creating a
``use_local_synchronization`` group over ranks that had one before (destroyed) fails to connect, fails
in its first collective or hangs (``new-group-local-sync-recreate-fails``: the hashed group name, and
with it the store keys of the rendezvous, are reused; ``check`` remembers per pool which ranks earlier
examples made such groups over); on a mesh whose ranks are not sorted along a dimension,
``get_local_rank(d)`` and the dim group's order are the sorted order, not the mesh position
``get_coordinate()`` reports (``device-mesh-local-rank-not-coordinate``); and with zero-size tensors
(collectives that move no data) a member can finish the example and destroy a group while a peer,
descheduled on a busy machine, is still connecting it: the peer's ``new_group`` fails with "Gloo
connectFullMesh failed ... Connection closed by peer" (``gloo-new-group-destroyed-early-breaks-peer``);
and on torch 2.6.0, dropping a gloo group right after a collective on it can freeze the rank for good
(``gloo-process-group-drop-deadlocks``), so an example destroys its groups itself and drops them an
example later (``_retire``).

Values: float32/float64/int8/int32/int64/uint8 of random or constant values (no NaN: what gloo's
MAX/MIN make of NaN is not this property's subject).  SUM over floats is compared with a tolerance
(gloo's summation order is its own); everything else bitwise.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import Kind, Problem, Symptom, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.toolkit.checks import first_difference, mismatch

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

HAS_SORT_RANKS = "sort_ranks" in inspect.signature(dist.new_group).parameters
DTYPES = (torch.float32, torch.float64, torch.int8, torch.int32, torch.int64, torch.uint8)
REDUCE_OPS = ("SUM", "MAX", "MIN")
MAX_BYTES = 1024
SEEDS = fst.seeds()


@dataclass(frozen=True)
class Group:
    """One subgroup.  ``kind`` is ``"new_group"`` (``ranks`` as passed to it) or ``"mesh"`` (``ranks``
    is the mesh, row-major, of ``mesh_shape``)."""

    kind: str
    ranks: tuple[int, ...]
    mesh_shape: tuple[int, ...] = ()
    sort_ranks: bool = True
    local_sync: bool = False

    def unsorted_dims(self) -> list[str]:
        """The labels (``"mesh dim d"``) of this mesh's dimensions along which some row of ranks is not
        ascending, where ``device-mesh-local-rank-not-coordinate`` shows (its predicate reads them)."""
        out: list[str] = []
        for r in self.ranks if self.kind == "mesh" else ():
            for entry in member_orders(self, r):
                if entry is not None and entry[1] != sorted(entry[1]) and entry[0] not in out:
                    out.append(entry[0])
        return out


@dataclass(frozen=True)
class SubgroupCase:
    """One example: the groups, the collectives run on each (``("all_reduce", "SUM")``,
    ``("broadcast", group_src)``, ``("all_gather", 0)``), the tensor spec and the seed of the inputs."""

    groups: tuple[Group, ...]
    ops: tuple[tuple[str, Any], ...]
    spec: fst.TensorSpec
    seed: int


# ---------------------------------------------------------------------------
# the reference, from the drawn case alone


def member_orders(group: Group, rank: int) -> list[tuple[str, list[int]] | None]:
    """Per collective group this rank should use for ``group``: (label, global ranks in group-rank order),
    or None where the rank is outside it.  One for a new_group, one per dimension for a mesh."""
    if group.kind == "new_group":
        if rank not in group.ranks:
            return [None]
        order = sorted(group.ranks) if group.sort_ranks else list(group.ranks)
        return [("new_group", order)]
    if rank not in group.ranks:
        return [None] * len(group.mesh_shape)
    coord = mesh_coordinate(group, rank)
    out: list[tuple[str, list[int]] | None] = []
    for d in range(len(group.mesh_shape)):
        row = [
            r
            for r in group.ranks
            if all(c == k for i, (c, k) in enumerate(zip(mesh_coordinate(group, r), coord, strict=True)) if i != d)
        ]
        out.append((f"mesh dim {d}", row))  # row-major order: ascending along d
    return out


def mesh_coordinate(group: Group, rank: int) -> tuple[int, ...]:
    """``rank``'s position in the drawn mesh."""
    flat = group.ranks.index(rank)
    coord = []
    for size in reversed(group.mesh_shape):
        coord.append(flat % size)
        flat //= size
    return tuple(reversed(coord))


def input_of(spec: fst.TensorSpec, seed: int, step: int, rank: int, device: Any = "cpu") -> torch.Tensor:
    """Global rank ``rank``'s input to collective ``step`` of the example."""
    return spec.materialize(device, (seed * 64 + step * 8 + rank) % 2**63)


def _reduce(inputs: list[torch.Tensor], op: str) -> torch.Tensor:
    stacked = torch.stack([t.contiguous() for t in inputs])
    if op == "MAX":
        return stacked.amax(0)
    if op == "MIN":
        return stacked.amin(0)
    wide = torch.float64 if stacked.is_floating_point() else torch.int64
    return stacked.to(wide).sum(0).to(stacked.dtype)  # integer SUM wraps, as the dtype does


def _close(actual: torch.Tensor, expected: torch.Tensor, inputs: list[torch.Tensor]) -> Problem | None:
    """Float SUM: equal up to rounding in any summation order (a bound from the sum of magnitudes)."""
    if tuple(actual.shape) != tuple(expected.shape) or actual.dtype != expected.dtype:
        return first_difference(actual, expected)
    bound = torch.stack([t.to(torch.float64).abs() for t in inputs]).sum(0) * 4 * torch.finfo(actual.dtype).eps
    err = (actual.to(torch.float64) - torch.stack([t.to(torch.float64) for t in inputs]).sum(0)).abs()
    return mismatch("", actual, expected, err > bound, bound)


# ---------------------------------------------------------------------------
# on the ranks


# The groups of the last examples, destroyed but still referenced (see _retire).
_RETIRED: collections.deque[list[Any]] = collections.deque()
_RETIRED_KEPT = 1  # examples whose groups stay referenced after they end


def _retire(made: list[list[Any]]) -> None:
    """Destroy this example's process groups now, and drop the last reference to them only after the next
    example: on torch 2.6.0 (known bug ``gloo-process-group-drop-deadlocks``) dropping a gloo group runs its
    destructor with the GIL held, which joins the group's worker threads; a worker still freeing the Work of
    a collective that just completed needs the GIL for the Work's tensors, and the rank freezes for good (its
    peers then time out in the next example, whatever property it is).  By the next example the workers are
    idle.  (Dropped at once, by the pool's isolation, that race froze about 1 example in 30 here.)"""
    groups: list[Any] = []
    for handles in made:
        for handle in handles:
            if handle is None:
                continue
            if hasattr(handle, "get_group"):  # a DeviceMesh: its dim groups, where this rank is in it
                pgs = [handle.get_group(d) for d in range(handle.mesh.ndim)] if handle.get_coordinate() else []
            else:
                pgs = [handle]
            groups += [
                pg
                for pg in pgs
                if pg is not dist.GroupMember.NON_GROUP_MEMBER
                and pg is not dist.group.WORLD
                and all(pg is not seen for seen in groups)
            ]
    for pg in reversed(groups):  # newest first, as the pool's isolation would
        with contextlib.suppress(Exception):  # not registered (a stand-in's group): the pool's isolation's
            dist.destroy_process_group(pg)
    _RETIRED.append(groups)
    while len(_RETIRED) > _RETIRED_KEPT:
        _RETIRED.popleft()


def _make_groups(case: SubgroupCase, new_group: Callable[..., Any], device_type: str, made: list[list[Any]]) -> None:
    """Every rank creates every group, in the same order (``new_group`` needs all ranks); appends, per group,
    the process group(s) this rank uses (None where it is outside) to ``made``."""
    for g in case.groups:
        if g.kind == "new_group":
            kwargs: dict[str, Any] = {"use_local_synchronization": True} if g.local_sync else {}
            if HAS_SORT_RANKS and not g.sort_ranks:
                kwargs["sort_ranks"] = False
            pg = new_group(list(g.ranks), **kwargs)
            made.append([pg if dist.get_rank() in g.ranks else None])
        else:
            from torch.distributed.device_mesh import DeviceMesh

            mesh = DeviceMesh(device_type, torch.tensor(g.ranks).reshape(g.mesh_shape))
            made.append([mesh])


def subgroups_and_check(
    ctx: RankContext,
    case: SubgroupCase,
    new_group: Callable[..., Any] = dist.new_group,
    collectives: dict[str, Callable[..., Any]] | None = None,
) -> list[Problem] | None:
    """On every rank: create ``case.groups``, run ``case.ops`` on each; None if every tensor is what the
    reference says, else what differs.  ``new_group`` and ``collectives`` (keyed ``all_reduce``,
    ``broadcast``, ``all_gather``) are swappable, for planted bugs."""
    fns: dict[str, Callable[..., Any]] = {
        "all_reduce": dist.all_reduce,
        "broadcast": dist.broadcast,
        "all_gather": dist.all_gather,
        **(collectives or {}),
    }
    made: list[list[Any]] = []
    try:
        _make_groups(case, new_group, ctx.device.type, made)  # first: nothing may fail before every rank made them
        return _run_ops(ctx, case, fns, made)
    finally:
        _retire(made)


def _run_ops(
    ctx: RankContext, case: SubgroupCase, fns: dict[str, Callable[..., Any]], made: list[list[Any]]
) -> list[Problem] | None:
    rank = ctx.rank
    problems: list[Problem] = []
    for gi, (g, handles) in enumerate(zip(case.groups, made, strict=True)):
        orders = member_orders(g, rank)
        if g.kind == "mesh":
            mesh = handles[0]
            coord = mesh.get_coordinate()
            want = mesh_coordinate(g, rank) if rank in g.ranks else None
            if (tuple(coord) if coord is not None else None) != want:
                problems.append(
                    Problem(Kind.MISMATCH, f"mesh {g.ranks} {g.mesh_shape}: get_coordinate()", got=coord, expected=want)
                )
            if want is None:
                continue
            pgs = [mesh.get_group(d) for d in range(len(g.mesh_shape))]
            for d, pg in enumerate(pgs):
                local = mesh.get_local_rank(d)
                if local != want[d]:
                    member = orders[d]
                    row = member[1] if member is not None else []
                    sorted_order = row != sorted(row) and local == sorted(row).index(rank)
                    problems.append(
                        Problem(
                            Kind.MISMATCH,
                            f"mesh dim {d} of {g.ranks} {g.mesh_shape}: get_local_rank({d})",
                            got=local,
                            expected=want[d],
                            detail=f"(the coordinate; group ranks {dist.get_process_group_ranks(pg)})",
                            symptom=Symptom.MESH_SORTED_ORDER if sorted_order else None,
                        )
                    )
        else:
            pgs = [handles[0] if handles[0] is not None else dist.GroupMember.NON_GROUP_MEMBER]
        for d, (pg, member) in enumerate(zip(pgs, orders, strict=True)):
            for i, (name, arg) in enumerate(case.ops):
                step = gi * 16 + d * 4 + i  # the same on every rank, members or not
                problems += _run_op(fns, name, arg, pg, member, case, step, rank, ctx.device, g)
    return problems or None


def _run_op(
    fns: dict[str, Callable[..., Any]],
    name: str,
    arg: Any,
    pg: Any,
    member: tuple[str, list[int]] | None,
    case: SubgroupCase,
    step: int,
    rank: int,
    device: Any,
    g: Group,
) -> list[Problem]:
    spec, seed = case.spec, case.seed
    if member is None and name == "broadcast":
        return []  # torch checks src against the group before membership: a ValueError outside it
    mine = input_of(spec, seed, step, rank, device)
    where = f"{name}{'(' + str(arg) + ')' if name != 'all_gather' else ''} on {g.kind} {list(g.ranks)}"
    with warnings.catch_warnings():  # torch warns each rank outside a group that calls its collective
        warnings.filterwarnings("ignore", message=".*does not belong to the given group.*")
        if name == "all_gather":
            size = len(member[1]) if member else 1
            outs = [torch.zeros_like(mine) for _ in range(size)]
            fns["all_gather"](outs, mine, group=pg)
        elif name == "broadcast":
            src = member[1][arg % len(member[1])] if member else 0
            fns["broadcast"](mine, src, group=pg)
        else:
            fns["all_reduce"](mine, op=getattr(dist.ReduceOp, arg), group=pg)
    if member is None:  # outside the group: nothing may change
        diff = first_difference(mine, input_of(spec, seed, step, rank, device))
        if name == "all_gather":
            diff = diff or next(
                (first_difference(o, torch.zeros_like(o)) for o in outs if first_difference(o, torch.zeros_like(o))),
                None,
            )
        if diff is None:
            return []
        return [diff.about(f"{where}: rank {rank} is outside the group, yet its tensor changed")]
    label, order = member
    inputs = [input_of(spec, seed, step, r, device) for r in order]
    where = f"{where} ({label}, group order {order})"
    if name == "all_gather":
        wrong = [
            d.about(f"{where}: output {i} (group rank {i} = rank {order[i]})")
            for i, (o, e) in enumerate(zip(outs, inputs, strict=True))
            if (d := first_difference(o, e))
        ]
        if (
            wrong
            and g.kind == "mesh"
            and order != sorted(order)
            and all(
                first_difference(o, input_of(spec, seed, step, r, device)) is None
                for o, r in zip(outs, sorted(order), strict=True)
            )
        ):
            wrong = [w.with_symptom(Symptom.MESH_SORTED_ORDER) for w in wrong]
        return wrong
    if name == "broadcast":
        diff = first_difference(mine, inputs[arg % len(order)])
    elif arg == "SUM" and spec.dtype.is_floating_point:
        diff = _close(mine, _reduce(inputs, arg), inputs)
    else:
        diff = first_difference(mine, _reduce(inputs, arg))
    return [] if diff is None else [diff.about(where)]


# ---------------------------------------------------------------------------
# strategies


def _mesh_shapes(n: int) -> list[tuple[int, ...]]:
    return [(n,)] + [(a, n // a) for a in range(2, n) if n % a == 0]


@st.composite
def groups(
    draw: st.DrawFn,
    world_size: int,
    first: bool = True,
    like: Group | None = None,
    kinds: tuple[str, ...] = ("new_group", "mesh"),
) -> Group:
    """A Group over a drawn subset in a drawn order (``like``'s ranks in another order, if given).
    Shrinks to ``new_group([0])``, sorted."""
    kind = draw(st.sampled_from(kinds))
    if like is not None:
        subset = like.ranks
    else:
        subset = draw(fst.rank_subsets(world_size, min_size=1))
    ranks = tuple(draw(st.permutations(subset)))
    if kind == "mesh":
        return Group("mesh", ranks, draw(st.sampled_from(_mesh_shapes(len(ranks)))))
    sort_ranks = draw(st.booleans().map(lambda b: not b)) if HAS_SORT_RANKS else True
    local_sync = draw(st.booleans()) if first else False
    return Group("new_group", ranks, (), sort_ranks, local_sync)


def _ops() -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.tuples(st.just("all_reduce"), st.sampled_from(REDUCE_OPS)),
        st.tuples(st.just("broadcast"), st.integers(0, 3)),
        st.tuples(st.just("all_gather"), st.just(0)),
    )


@st.composite
def subgroup_cases(
    draw: st.DrawFn, world_size: int, kinds: tuple[str, ...] = ("new_group", "mesh"), local_sync: bool = False
) -> SubgroupCase:
    """A SubgroupCase: one or two groups (the second one, often, the first one's ranks in another
    order), one to three collectives, a tensor up to 1 KiB.  Shrinks to one sorted ``new_group([0])``
    all-reducing a float32[1] with SUM.

    ``local_sync=True`` also draws ``use_local_synchronization`` for the first group.  It is off by
    default: the known bug ``new-group-local-sync-recreate-fails`` depends on what earlier examples
    in the same rank processes created (a group over the same ranks), and often hangs the rendezvous
    until the pool's timeout, so in the per-example loop it would cost a timeout and a pool restart
    per sighting and could not be shrunk; its standalone reproducer shows it instead.  Measured through
    RankPool (3 ranks, pool timeout 10 s, local-sync groups over (2, 0) and (0, 1) in turn): 30 examples,
    11 sightings, every failure recognised, 130 s (the other examples take milliseconds).  Drawn by
    default, half the examples would make such a group, and most sightings would cost a pool timeout."""
    first = draw(groups(world_size, first=local_sync, kinds=kinds), label="group")
    chosen = [first]
    if draw(st.booleans(), label="second group"):
        same = draw(st.booleans(), label="same ranks")
        chosen.append(draw(groups(world_size, first=False, like=first if same else None, kinds=kinds)))
    ops = tuple(draw(st.lists(_ops(), min_size=1, max_size=3), label="ops"))
    spec = draw(
        fst.tensor_specs(dtypes=st.sampled_from(DTYPES), patterns=("random", "constant"), max_bytes=MAX_BYTES),
        label="spec",
    )
    return SubgroupCase(tuple(chosen), ops, spec, draw(SEEDS, label="seed"))


# ---------------------------------------------------------------------------
# known bugs (their entries are in known_bugs.py next to it), and the driver-side check

# Per pool, the rank sets of the locally synchronised groups its earlier examples made (every group is
# destroyed after its example): new-group-local-sync-recreate-fails needs one of those made again.
_LOCAL_SYNC_BEFORE: weakref.WeakKeyDictionary[Any, set[tuple[int, ...]]] = weakref.WeakKeyDictionary()


def _local_sync_before(pool: Any) -> set[tuple[int, ...]]:
    try:
        return _LOCAL_SYNC_BEFORE.setdefault(pool, set())
    except TypeError:  # a pool that can't be weakly referenced: no history, so never this bug
        return set()


def check(
    pool: Pool,
    case: SubgroupCase,
    *,
    new_group: Callable[..., Any] = dist.new_group,
    collectives: dict[str, Callable[..., Any]] | None = None,
) -> None:
    """Run ``case`` over ``pool`` (with ``new_group`` and the ``collectives`` stand-ins, torch's by
    default); raise :class:`PropertyFailure` naming every rank that saw a value other than the reference's."""
    before = _local_sync_before(pool)
    local_sync = {tuple(sorted(g.ranks)) for g in case.groups if g.local_sync}
    again = tuple(sorted(before & local_sync))  # the example's field only where it matters
    try:
        with known_failures("subgroups", case=case, **({"local_sync_before": again} if again else {})):
            results = pool.run(subgroups_and_check, case, new_group=new_group, collectives=collectives)
            wrong = {rank: problems for rank, problems in enumerate(results) if problems}
            if wrong:
                raise PropertyFailure(f"ranks {sorted(wrong)} saw wrong subgroup results:{by_rank(wrong)}", results)
    finally:
        before |= local_sync
