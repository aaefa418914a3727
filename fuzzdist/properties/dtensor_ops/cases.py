"""One example of the family (:class:`OpCase`) and the strategy that draws it (:func:`op_cases`).

A case names an operator of :data:`~fuzzdist.properties.dtensor_ops.catalogue.OPS`, its drawn arguments
with every tensor an :class:`~fuzzdist.properties.dtensor_ops.operands.Operand` placed on a drawn mesh
(1-D, or 2-D where the world size factors), and, where the operator's backward is checked, the seed of
the upstream gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from hypothesis import strategies as st

from fuzzdist.properties.dtensor_ops.catalogue import OpDef, all_ops
from fuzzdist.properties.dtensor_ops.inputs import SEEDS
from fuzzdist.properties.dtensor_ops.operands import PARTIAL_OPS, Alias, Operand


@dataclass(frozen=True)
class OpCase:
    """``op`` (a name in ``OPS``) called with ``args`` and ``kwargs`` (pairs) on a mesh of ``mesh_shape``;
    ``grad_seed`` builds the upstream gradient of each output (None: the backward is not checked)."""

    op: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    mesh_shape: tuple[int, ...]
    grad_seed: int | None = None

    @property
    def operands(self) -> list[Operand | Alias]:
        """Every tensor argument, flattened in order (the order ``Alias`` indexes)."""
        return flat_operands(self.args)


def flat_operands(value: Any) -> list[Operand | Alias]:
    """The operands in ``value`` (nested tuples and lists of arguments), in order."""
    if isinstance(value, (Operand, Alias)):
        return [value]
    if isinstance(value, (list, tuple)):
        return [o for v in value for o in flat_operands(v)]
    return []


def substitute(value: Any, replacement: list[Any], start: int = 0) -> tuple[Any, int]:
    """``value`` with its ``i``-th operand replaced by ``replacement[i]``; and the next index."""
    if isinstance(value, (Operand, Alias)):
        return replacement[start], start + 1
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            new, start = substitute(v, replacement, start)
            out.append(new)
        return type(value)(out), start
    return value, start


def mesh_shapes(world_size: int) -> list[tuple[int, ...]]:
    """The 1-D mesh of every rank, then every 2-D mesh (a, b) with a * b = world_size, size-1 dims last."""
    two_d = [(a, world_size // a) for a in range(1, world_size + 1) if world_size % a == 0]
    return [(world_size,)] + sorted(two_d, key=lambda s: (min(s) == 1, s))


def placement_kinds(operand: Operand, partial: bool) -> list[str]:
    """The kinds of placement ``operand`` may take on one mesh dim, in shrink order: Replicate, the Partial
    ones (not for bools: no reduce op over bools is a value's split), then Shard (``"S"``, its dim drawn
    after it).  Partial comes before Shard and the dim apart so that the shrinker can cut a dim or a size
    whatever the operand is placed by: a Shard's dim drawn past the last dim becomes dim 0, and at the
    smallest sizes (a dim of 1, which Shard puts whole on one rank) a Partial is often what still fails."""
    kinds = ["R"]
    if partial and operand.spec.dtype != torch.bool:
        kinds += list(PARTIAL_OPS)
    return kinds + (["S"] if operand.ndim else [])


@st.composite
def _placed(draw: st.DrawFn, operand: Operand, mesh_shape: tuple[int, ...], partial: bool) -> Operand:
    kinds = placement_kinds(operand, partial)
    placements = tuple(
        f"S{draw(st.integers(0, operand.ndim - 1), label='shard dim')}" if kind == "S" else kind
        for kind in (draw(st.sampled_from(kinds), label="placement") for _ in mesh_shape)
    )
    partials = [name for name in placements if name in PARTIAL_OPS]
    # one reduce op per DTensor: "Mixed Partial reduce types are not supported in the same placement list"
    # (DTensor raises ValueError saying so, torch/distributed/tensor/_utils.py)
    placements = tuple(partials[0] if name in PARTIAL_OPS else name for name in placements)
    owners = tuple(
        draw(st.integers(0, n - 1), label="partial owner") if name in PARTIAL_OPS else 0
        for name, n in zip(placements, mesh_shape, strict=True)
    )
    return operand.placed(placements, owners)


def _aliasable(a: Operand, b: Operand) -> bool:
    return a.spec == b.spec and a.index_high == b.index_high and a.unique_dim == b.unique_dim


def by_group(names: list[str], catalogue: dict[str, OpDef]) -> st.SearchStrategy[str]:
    """One of ``names``: its group first, each group alike, then an operator of that group.  Drawn
    uniformly from the names, the ~500 pointwise overloads of ``schema_ops`` (which share one sharding
    rule) would take most examples from the groups whose rules differ operator by operator."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(catalogue[name].group, []).append(name)
    return st.sampled_from(sorted(groups)).flatmap(lambda group: st.sampled_from(groups[group]))


@st.composite
def op_cases(draw: st.DrawFn, world_size: int, ops: tuple[str, ...] | None = None) -> OpCase:
    """An :class:`OpCase` for ``world_size`` ranks, of one of ``ops`` (default: every registered
    operator; its group drawn first, :func:`by_group`).  Shrinks to the first group's first operator,
    its smallest arguments, the 1-D mesh and Replicate."""
    catalogue = all_ops()
    names = sorted(catalogue) if ops is None else list(ops)
    op_def: OpDef = catalogue[draw(by_group(names, catalogue), label="op")]
    args, kwargs = draw(op_def.arguments(), label="arguments")
    mesh_shape = draw(st.sampled_from(mesh_shapes(world_size)), label="mesh_shape")
    grad = op_def.grad and op_def.mutates is None and draw(st.booleans(), label="backward")
    flat = flat_operands(args)
    placed: list[Operand | Alias] = []
    for i, operand in enumerate(flat):
        assert isinstance(operand, Operand)
        same = [j for j in range(i) if isinstance(flat[j], Operand) and _aliasable(flat[j], operand)]  # type: ignore[arg-type]
        if draw(st.booleans(), label="alias") and same:
            placed.append(Alias(same[0]))
            continue
        wants_grad = grad and operand.spec.dtype.is_floating_point and operand.index_high is None
        placed.append(replace(draw(_placed(operand, mesh_shape, op_def.partial)), requires_grad=wants_grad))
    new_args, _ = substitute(args, placed)
    grad_seed = draw(SEEDS, label="grad_seed") if grad else None
    return OpCase(op_def.name, new_args, tuple(sorted(kwargs.items())), mesh_shape, grad_seed)
