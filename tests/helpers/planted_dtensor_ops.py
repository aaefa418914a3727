"""Planted DTensor sharding rules: each wraps the sharding propagator's answer for one aten overload and
makes it wrong the way a real rule can be wrong, for as long as the context manager is entered on a rank.

The propagator caches its answers (in Python and in C++), so both caches are cleared on entry and exit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._op_schema import OpSchema, OutputSharding
from torch.distributed.tensor._sharding_prop import LocalLRUCache

aten = torch.ops.aten


def _clear(prop: Any) -> None:
    prop.propagate_op_sharding.cache_clear()
    torch._C._clear_DTensor_sharding_propagator_cache()


@contextlib.contextmanager
def planted(op: Any, rewrite: Callable[[OpSchema, OutputSharding], OutputSharding]) -> Iterator[None]:
    """While entered, the propagator's answer for ``op`` is ``rewrite(schema, answer)``."""
    prop = DTensor._op_dispatcher.sharding_propagator
    original, cached = prop.propagate_op_sharding_non_cached, prop.propagate_op_sharding

    def wrong(schema: OpSchema) -> OutputSharding:
        answer = original(schema)
        return rewrite(schema, answer) if schema.op is op else answer

    prop.propagate_op_sharding_non_cached = wrong
    prop.propagate_op_sharding = LocalLRUCache(wrong)
    _clear(prop)
    try:
        yield
    finally:
        prop.propagate_op_sharding_non_cached, prop.propagate_op_sharding = original, cached
        _clear(prop)


def _spec(like: DTensorSpec, placements: tuple[Any, ...]) -> DTensorSpec:
    return DTensorSpec(like.mesh, placements, tensor_meta=like.tensor_meta)


def _partial_made_replicate(schema: OpSchema, answer: OutputSharding) -> OutputSharding:
    """The output's Partial placements reported as Replicate: each rank keeps its own partial result."""
    out = answer.output_spec
    if not isinstance(out, DTensorSpec) or not any(p.is_partial() for p in out.placements):
        return answer
    placements = tuple(Replicate() if p.is_partial() else p for p in out.placements)
    return OutputSharding(
        _spec(out, placements),
        answer.redistribute_schema,
        answer.needs_redistribute,
        answer.use_val_from_redistribute_schema,
    )


def _product_of_partials_kept_partial(schema: OpSchema, answer: OutputSharding) -> OutputSharding:
    """mul of two Partial(sum) inputs run on the pieces as they are, the output Partial(sum): the sum of the
    products of the pieces, not the product of the sums."""
    a, b = schema.args_schema[0], schema.args_schema[1]
    if not (isinstance(a, DTensorSpec) and isinstance(b, DTensorSpec)) or a.placements != b.placements:
        return answer
    if not all(p.is_partial() for p in a.placements) or not isinstance(answer.output_spec, DTensorSpec):
        return answer
    return OutputSharding(_spec(answer.output_spec, a.placements))


def _transpose_keeping_shard_dim(schema: OpSchema, answer: OutputSharding) -> OutputSharding:
    """transpose's output placements are its input's: a shard of a swapped dim names the wrong dim."""
    a = schema.args_schema[0]
    out = answer.output_spec
    if answer.redistribute_schema is not None or not isinstance(out, DTensorSpec) or not isinstance(a, DTensorSpec):
        return answer
    return OutputSharding(_spec(out, a.placements))


def _redistribution_dropped(schema: OpSchema, answer: OutputSharding) -> OutputSharding:
    """Where the rule asks for its inputs to be redistributed first, the operator runs on the pieces as they
    are instead, and its outputs keep the first input's placements."""
    a = schema.args_schema[0]
    out = answer.output_spec
    if answer.redistribute_schema is None or not isinstance(a, DTensorSpec):
        return answer
    if isinstance(out, DTensorSpec):
        return OutputSharding(_spec(out, a.placements))
    if isinstance(out, tuple) and all(isinstance(o, DTensorSpec) for o in out):
        return OutputSharding(tuple(_spec(o, a.placements) for o in out))
    return answer


def _made_replicate(which: Callable[[Any], bool]) -> Callable[[OpSchema, OutputSharding], OutputSharding]:
    """A rewrite that reports every output placement ``which`` picks as Replicate (one output or a list or
    tuple of them): each rank keeps its own piece or partial value as if it were the whole."""

    def spec(out: Any) -> Any:
        if not isinstance(out, DTensorSpec):
            return out
        return _spec(out, tuple(Replicate() if which(p) else p for p in out.placements))

    def rewrite(schema: OpSchema, answer: OutputSharding) -> OutputSharding:
        out = answer.output_spec
        new = type(out)(spec(o) for o in out) if isinstance(out, (list, tuple)) else spec(out)
        return OutputSharding(
            new, answer.redistribute_schema, answer.needs_redistribute, answer.use_val_from_redistribute_schema
        )

    return rewrite


@contextlib.contextmanager
def mul_keeps_partial_product() -> Iterator[None]:
    """pointwise: ``aten.mul.Tensor`` of two Partial(sum) inputs stays Partial(sum) without reducing them."""
    with planted(aten.mul.Tensor, _product_of_partials_kept_partial):
        yield


@contextlib.contextmanager
def sum_partial_as_replicate() -> Iterator[None]:
    """reductions: ``aten.sum.dim_IntList`` over a sharded dim says Replicate where its result is Partial."""
    with planted(aten.sum.dim_IntList, _partial_made_replicate):
        yield


@contextlib.contextmanager
def mm_partial_as_replicate() -> Iterator[None]:
    """matrix: ``aten.mm`` contracting a sharded dim says Replicate where its result is Partial."""
    with planted(aten.mm.default, _partial_made_replicate):
        yield


@contextlib.contextmanager
def transpose_keeps_shard_dim() -> Iterator[None]:
    """views: ``aten.transpose.int`` keeps its input's placements, so Shard(0) stays Shard(0)."""
    with planted(aten.transpose.int, _transpose_keeping_shard_dim):
        yield


@contextlib.contextmanager
def embedding_partial_as_replicate() -> Iterator[None]:
    """indexing: ``aten.embedding`` of a row-sharded table says Replicate where its result is (masked) Partial."""
    with planted(aten.embedding.default, _partial_made_replicate):
        yield


@contextlib.contextmanager
def sort_without_replicating_its_dim() -> Iterator[None]:
    """joins: ``aten.sort.stable`` runs on each rank's piece where the rule asks for the input replicated first."""
    with planted(aten.sort.stable, _redistribution_dropped):
        yield


@contextlib.contextmanager
def softmax_without_replicating_its_dim() -> Iterator[None]:
    """nn: ``aten._softmax.default`` runs on each rank's piece where the rule asks for its input replicated
    first."""
    with planted(aten._softmax.default, _redistribution_dropped):
        yield


@contextlib.contextmanager
def flip_without_replicating_its_dim() -> Iterator[None]:
    """tensors: ``aten.flip.default`` runs on each rank's piece where the rule asks for its input replicated
    first."""
    with planted(aten.flip.default, _redistribution_dropped):
        yield


@contextlib.contextmanager
def avg_pool_shard_as_replicate() -> Iterator[None]:
    """conv: ``aten.avg_pool2d.default`` (what ``avg_pool1d`` runs, on its input unsqueezed) says Replicate
    where its output is sharded."""
    with planted(aten.avg_pool2d.default, _made_replicate(lambda p: p.is_shard())):
        yield


@contextlib.contextmanager
def dropout_shard_as_replicate() -> Iterator[None]:
    """random_values: ``aten.native_dropout.default`` says Replicate where its outputs are sharded."""
    with planted(aten.native_dropout.default, _made_replicate(lambda p: p.is_shard())):
        yield


@contextlib.contextmanager
def foreach_add_partial_as_replicate() -> Iterator[None]:
    """foreach: ``aten._foreach_add.List`` says Replicate where its outputs are Partial."""
    with planted(aten._foreach_add.List, _made_replicate(lambda p: p.is_partial())):
        yield


@contextlib.contextmanager
def raises_before_any_collective() -> Iterator[None]:
    """Every DTensor call raises on entry, before it issues a collective (a refused input, say)."""
    raise RuntimeError("planted: raised before any collective")
    yield  # pragma: no cover - never reached


@contextlib.contextmanager
def raises_after_a_collective() -> Iterator[None]:
    """Every DTensor call raises after one all-reduce on the default group: a rank left part-way through."""
    torch.distributed.all_reduce(torch.zeros(1))
    raise RuntimeError("planted: raised after a collective")
    yield  # pragma: no cover - never reached
