"""The operators the family draws: one :class:`OpDef` per operator (or per way of calling it), registered
by the group modules (:data:`GROUPS`) into :data:`OPS`, by name.

A case names its operator, so it travels as a string; every rank looks it up here (:func:`lookup`),
importing only that operator's group: a rank never pays for the whole catalogue (see :func:`lookup`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from fuzzdist.errors import InvalidArgument

GROUPS = (
    "pointwise",
    "reductions",
    "views",
    "matrix",
    "indexing",
    "nn",
    "joins",
    "schema_ops",
    "tensors",
    "conv",
    "random_values",
    "foreach",
)
"""The group modules of :mod:`fuzzdist.properties.dtensor_ops`, each registering its operators."""

Arguments = tuple[tuple[Any, ...], dict[str, Any]]
"""An operator's drawn arguments: positional (``Operand``s, lists of them, plain values) and keyword."""


@dataclass(frozen=True)
class OpDef:
    """One operator as the family calls it.

    ``call(*args, **kwargs)`` runs it on local tensors or on DTensors alike (a ``torch`` function, a
    ``Tensor`` method or an aten overload); ``arguments()`` draws its arguments with unplaced
    :class:`~fuzzdist.properties.dtensor_ops.operands.Operand`s.  ``reordered``: DTensor may accumulate in
    another order than the local operator (sums, matmuls), so floats compare within a bound
    (:mod:`~fuzzdist.properties.dtensor_ops.accuracy`) of ``terms(args, kwargs)`` terms per element of
    ``magnitude`` (default: the operator over the float64 absolute values of its arguments).  ``grad``:
    its backward is checked.  ``mutates``: the flat index of the operand an in-place operator changes.
    ``out``: it writes its result into its last operand, an ``out=`` tensor (``mutates`` names it).
    ``outputs``: which outputs are compared (None: all).  ``partial``: Partial placements
    drawn.  ``root``: see the field."""

    name: str
    group: str
    call: Callable[..., Any]
    arguments: Callable[[], st.SearchStrategy[Arguments]]
    reordered: bool = False
    terms: Callable[[tuple[Any, ...], dict[str, Any]], int] | None = None
    magnitude: Callable[..., Any] | None = None
    grad: bool = False
    mutates: int | None = None
    out: bool = False
    outputs: tuple[int, ...] | None = None
    partial: bool = True
    local_domain: bool = False
    """Where the local operator raises, the drawn arguments are outside its domain (unknown to the
    generator): the example tests nothing, and passes."""
    root: bool = False
    """The result is the square root of a reordered sum: its bound is the square root of the sum's."""


OPS: dict[str, OpDef] = {}
"""Every registered operator, by name (``group.name``)."""


def register(*ops: OpDef) -> None:
    """Add ``ops`` to :data:`OPS`."""
    for op in ops:
        if op.name in OPS:
            raise InvalidArgument(f"operator {op.name!r} registered twice: give the second one another name")
        OPS[op.name] = op


def op_maker(group: str, **defaults: Any) -> Callable[..., OpDef]:
    """The ``OpDef`` factory of ``group``'s module: ``make(name, call, arguments, **fields)`` names the
    operator ``<group>.<name>``, with ``defaults`` for the fields not given."""

    def make(
        name: str, call: Callable[..., Any], arguments: Callable[[], st.SearchStrategy[Arguments]], **more: Any
    ) -> OpDef:
        return OpDef(f"{group}.{name}", group, call, arguments, **{**defaults, **more})

    return make


_loaded = False


def _group_module(group: str) -> Any:
    return importlib.import_module(f"fuzzdist.properties.dtensor_ops.{group}")


def all_ops() -> dict[str, OpDef]:
    """:data:`OPS`, once every group module has registered its operators (a module that registers on
    demand, ``schema_ops``, through its ``register_all``)."""
    global _loaded
    if not _loaded:
        _loaded = True
        for group in GROUPS:
            register_all = getattr(_group_module(group), "register_all", None)
            if register_all is not None:
                register_all()
    return OPS


_PREFIXES = {"schema": "schema_ops"}
"""Operator-name prefixes that are not their group module's name."""


def lookup(name: str) -> OpDef | None:
    """The operator ``name`` (``<group>.<operator>``), importing its group's module alone (None: unknown).

    What a rank calls: the whole catalogue costs seconds (the schema-driven group asks torch which dtype
    each of ~500 overloads takes, and every group builds its strategies), which a rank would pay again
    after every restart.  A group that registers on demand builds the one operator (its ``one``)."""
    if name in OPS:
        return OPS[name]
    prefix = name.split(".", 1)[0]
    group = _PREFIXES.get(prefix, prefix)
    if group not in GROUPS:
        return None
    module = _group_module(group)
    if name in OPS:
        return OPS[name]
    one = getattr(module, "one", None)
    return one(name) if one is not None else None
