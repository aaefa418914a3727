"""An operator's tensor arguments, as small picklable records the driver draws and every rank builds alike.

An :class:`Operand` is a tensor argument: its :class:`~fuzzdist.strategies.TensorSpec` and seed (or, for an
index tensor, the range its values are drawn from), and the placement it is handed to the operator with,
one name per mesh dimension:

* ``"R"``: ``Replicate()``; ``"S<d>"``: ``Shard(d)``, each rank's piece its ``torch.chunk`` piece (uneven
  and empty pieces included);
* ``"P+"``, ``"P>"``, ``"P<"``: ``Partial`` with reduce op sum, max and min.  Each rank along that mesh
  dimension holds a piece, and the pieces' reduction is exactly the full value (:func:`partial_pieces`).

``Alias(i)`` stands for the ``i``-th operand again: the same DTensor (and the same local tensor) passed
as two arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from fuzzdist.properties.dtensor import expected_local
from fuzzdist.strategies import TensorSpec, mix_seed

PARTIAL_OPS = {"P+": "sum", "P>": "max", "P<": "min"}
"""Partial placement names and the reduce op each stands for.  ``avg`` is not drawn: no split of a float
into pieces has a mean that is exactly the value in every order of summation."""

_MANTISSA_BITS = {torch.float64: 52, torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}
_BITS_VIEW = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


@dataclass(frozen=True)
class Operand:
    """A tensor argument: ``spec`` and ``seed`` build its full value (``index_high``: an int64 index tensor
    of ``spec.shape`` with values in ``[0, index_high)``, ``unique_dim``: values along that dim distinct);
    ``placements`` one name per mesh dim; ``owners`` per mesh dim, the rank along it whose Partial
    piece holds the top bits; ``requires_grad`` whether the operator's backward is checked for it."""

    spec: TensorSpec
    seed: int
    placements: tuple[str, ...] = ()
    owners: tuple[int, ...] = ()
    index_high: int | None = None
    unique_dim: int | None = None
    requires_grad: bool = False

    @property
    def ndim(self) -> int:
        """The full tensor's number of dims."""
        return len(self.spec.shape)

    def placed(self, placements: tuple[str, ...], owners: tuple[int, ...]) -> Operand:
        """This operand, handed over with ``placements``."""
        return replace(self, placements=placements, owners=owners)

    def full(self) -> torch.Tensor:
        """The full value, the same bits on every rank."""
        if self.index_high is None:
            return self.spec.materialize("cpu", self.seed)
        gen = torch.Generator().manual_seed(self.seed % 2**63)
        if self.unique_dim is None:
            return torch.randint(0, max(self.index_high, 1), self.spec.shape, generator=gen)
        # a prefix of a permutation along unique_dim: scatter and index_put without accumulation are only
        # defined for distinct indices ("the order is undefined" otherwise)
        shape, d = self.spec.shape, self.unique_dim
        keys = torch.rand((*shape[:d], self.index_high, *shape[d + 1 :]), generator=gen)
        return keys.argsort(dim=d).narrow(d, 0, shape[d]).contiguous()


@dataclass(frozen=True)
class Alias:
    """The ``index``-th operand (in the order the arguments are flattened) passed again."""

    index: int


def is_partial(name: str) -> bool:
    """Whether a placement name is a Partial one."""
    return name in PARTIAL_OPS


def shard_dim(name: str) -> int | None:
    """The tensor dim a ``"S<d>"`` placement name shards (None for any other placement)."""
    return int(name[1:]) if name.startswith("S") else None


def placement(api: Any, name: str) -> Any:
    """The DTensor placement a name stands for."""
    if name == "R":
        return api.Replicate()
    if name.startswith("S"):
        return api.Shard(int(name[1:]))
    return api.Partial(PARTIAL_OPS[name])


def _bit_chunks(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    """``x`` split into ``n`` floats of its own sign whose sum is exactly ``x`` in every order: each holds a
    disjoint run of ``x``'s significand bits (so any partial sum is ``x`` with some bits cleared, which
    the dtype holds exactly).  Non-finite values go whole into the first chunk, ``-0.0`` elsewhere."""
    bits = _MANTISSA_BITS.get(x.dtype)
    if bits is None or n == 1:
        return [x] + [torch.full_like(x, -0.0) for _ in range(n - 1)]
    as_int = x.view(_BITS_VIEW[x.dtype])
    cuts = [bits - (bits * k) // n for k in range(1, n)]  # clear the bits below each cut
    truncated = []
    for cut in cuts:
        mask = torch.tensor(-(1 << cut), dtype=as_int.dtype)
        truncated.append((as_int & mask).view(x.dtype))
    levels = [*truncated, x]
    chunks = [levels[0]] + [levels[i] - levels[i - 1] for i in range(1, len(levels))]
    finite = x.isfinite()
    zero = torch.full_like(x, -0.0)
    return [torch.where(finite, c, x if i == 0 else zero) for i, c in enumerate(chunks)]


def partial_pieces(full: torch.Tensor, reduce_op: str, n: int, owner: int, seed: int) -> list[torch.Tensor]:
    """``n`` pieces of ``full`` whose ``reduce_op`` reduction, in any order, is exactly ``full``: the
    rank ``owner`` places first.  Sums of floats split the significand (:func:`_bit_chunks`), of integers
    are split into shares of one sign; max and min give the owner ``full`` and the others
    random values no larger (no smaller)."""
    if reduce_op == "sum":
        if full.dtype.is_floating_point:
            chunks = _bit_chunks(full, n)
        else:
            # n - 1 pieces of full / n (truncated), the owner's the rest: every piece has full's sign and
            # their absolute values add up to |full|, so sum |piece * y| is |full * y| (accuracy's magnitude)
            share = torch.div(full, n, rounding_mode="trunc")
            chunks = [full - share * (n - 1), *[share.clone() for _ in range(n - 1)]]
    else:
        gen = torch.Generator().manual_seed(seed % 2**63)
        others = []
        for _ in range(n - 1):
            noise = torch.randint(-64, 64, full.shape, generator=gen).to(full.dtype)
            others.append(torch.minimum(full, noise) if reduce_op == "max" else torch.maximum(full, noise))
        chunks = [full, *others]
    return [chunks[(k - owner) % n] for k in range(n)]


def local_piece(op: Operand, full: torch.Tensor, mesh_shape: tuple[int, ...], coord: tuple[int, ...]) -> torch.Tensor:
    """What the rank at ``coord`` holds of ``op``: its Shard piece, then, for each Partial mesh dim, its
    Partial piece of that (each Partial dim splits what the ones before it left)."""
    piece = expected_local(full, mesh_shape, coord, op.placements).contiguous()
    for mesh_dim, name in enumerate(op.placements):
        if is_partial(name):
            # every rank along this mesh dim cuts the same pieces: the seed leaves its own coordinate out
            along = tuple(0 if m == mesh_dim else c for m, c in enumerate(coord))
            pieces = partial_pieces(
                piece, PARTIAL_OPS[name], mesh_shape[mesh_dim], op.owners[mesh_dim], mix_seed(op.seed, mesh_dim, *along)
            )
            piece = pieces[coord[mesh_dim]]
    return piece


def numel(shape: tuple[int, ...]) -> int:
    """The number of elements of ``shape``."""
    return math.prod(shape)
