"""DTensor operators: for a drawn operator, drawn inputs, a drawn mesh and drawn placements, the DTensor
result equals the same operator applied locally, with no communication, to the full tensors.

On CPU ranks over gloo, on 1-D and 2-D meshes of every rank (world sizes 2, 3 and 4), every operator of
:data:`~fuzzdist.properties.dtensor_ops.catalogue.OPS` (pointwise, reductions, views, matrix ops, indexing,
nn ops, joins, tensor constructors and scatters, convolution and pooling, list kernels, in-place
and ``out=`` variants, and the pointwise aten overloads DTensor registers, each
called through its schema) is called on DTensors built with ``DTensor.from_local`` from each rank's piece:

* ``Shard(d)`` of any dim, pieces with ``torch.chunk`` semantics (sizes no mesh dim divides, empty pieces);
* ``Replicate()``;
* ``Partial`` with reduce op sum, max or min, from pieces whose reduction is exactly the full value in any
  order (a float's significand split into disjoint runs of bits; see ``operands``).

Inputs: 0-d, size-1 and empty dims, every float dtype gloo carries with NaN, infinities, -0.0 and
subnormals (the ``special`` pattern), integer and bool operands where the operator takes them, Python
scalars, type promotion, broadcasting, and the same DTensor passed as two arguments.

Checks, on every rank: each output is a DTensor of the local result's dtype, shape and ``requires_grad``;
each rank's ``to_local()`` is exactly the piece its (Shard/Replicate) placements say of the output's
``full_tensor()``; ``full_tensor()`` equals the local result bitwise, or where DTensor may reorder a sum
(reductions, matmuls, linear operators on Partial inputs) within the bound ``accuracy`` derives from the
order of accumulation; an out-of-place operator leaves every rank's input pieces unchanged, an in-place
one changes its input as the local operator changes the full tensor; and for a drawn upstream gradient,
each input's gradient (``full_tensor()``) equals local autograd's within the same kind of bound.

The implementation under test is ``check(..., rules=...)``: a context manager entered on every rank
around the DTensor call (a planted sharding rule, say).  ``report()`` lists the overloads DTensor
registers and whether each is drawn.  Importing this package raises ImportError where torch has no DTensor.

Modules:

* ``operands``: an operator's tensor arguments and each rank's piece of them (Shard, Partial splits).
* ``inputs``: the strategies the groups draw arguments with.
* ``catalogue``: ``OpDef`` and the registry of operators (``OPS``).
* ``cases``: ``OpCase`` and the ``op_cases`` strategy.
* ``accuracy``: bitwise, or the bound from the order of accumulation.
* ``ranks``: what every rank runs.
* ``pointwise``: unary, binary, ternary, in-place and ``out=`` pointwise operators.
* ``reductions``: sum, mean, amax/amin, prod, norms, var/std, argmax/argmin, all/any, logsumexp, cumsum.
* ``views``: views and reshapes.
* ``matrix``: mm, bmm, matmul, addmm, baddbmm, linear, einsum, dot.
* ``indexing``: index_select, gather, scatter, index_put, masked_fill, embedding.
* ``nn``: softmax, norms, activations, losses, scaled dot-product attention.
* ``joins``: cat, stack, sort, topk.
* ``schema_ops``: the pointwise aten overloads DTensor registers, called through their schemas.
* ``tensors``: ``*_like`` and ``new_*``, fills, flip, roll, tril/triu, diagonals, index_fill, index_reduce,
  advanced indexing, split by sizes, and the scatters into a slice.
* ``conv``: convolutions, pooling, batch and group norm, interpolation, padding.
* ``random_values``: random operators at the parameters that make their values certain (dropout with p=0).
* ``foreach``: multi-tensor (list) kernels.
* ``overloads``: the registered-overload report.
* ``known_bugs``: the known torch bugs this family meets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import known_failures
from fuzzdist.problems import by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties.dtensor_ops.cases import OpCase, mesh_shapes, op_cases
from fuzzdist.properties.dtensor_ops.catalogue import OPS, OpDef, all_ops
from fuzzdist.properties.dtensor_ops.ranks import compute_and_check, torch_rules

if TYPE_CHECKING:
    from collections.abc import Callable

    from fuzzdist.pool import Pool

__all__ = ["OPS", "OpCase", "OpDef", "all_ops", "check", "mesh_shapes", "op_cases"]


def check(pool: Pool, case: OpCase, *, rules: Callable[[], Any] = torch_rules) -> None:
    """Run ``case``'s operator on DTensors over ``pool`` (with ``rules`` entered on every rank around the
    call: DTensor's own by default) and locally on every rank; raise :class:`PropertyFailure` if any rank
    saw the results differ."""
    if not isinstance(case, OpCase):
        raise InvalidArgument(
            f"case must be an OpCase (draw one with dtensor_ops.op_cases(world_size)), got {type(case).__name__}"
        )
    if case.op not in all_ops():
        raise InvalidArgument(f"unknown operator {case.op!r}: choose one of dtensor_ops.OPS ({len(OPS)} registered)")
    world = 1
    for n in case.mesh_shape:
        world *= n
    if world != pool.world_size:
        raise InvalidArgument(
            f"the case's mesh {case.mesh_shape} has {world} ranks but the pool has "
            f"{pool.world_size}: draw it with op_cases({pool.world_size})"
        )
    if not callable(rules):
        raise InvalidArgument(f"rules must be a context-manager factory importable on the ranks, got {rules!r}")
    with known_failures("dtensor_ops", case=case):
        results = pool.run(compute_and_check, case, rules=rules)
        wrong = {rank: problems for rank, problems in enumerate(results) if problems}
        if wrong:
            raise PropertyFailure(
                f"{case.op} on DTensors differs from the local operator on ranks {sorted(wrong)}:{by_rank(wrong)}",
                results,
            )
