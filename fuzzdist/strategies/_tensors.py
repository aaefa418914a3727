"""``TensorSpec``: a small picklable description of a tensor that every rank
materializes bit-identically from (spec, seed) (the strategy: ``_tensor_specs``).

How ``materialize`` stays bitwise reproducible and never raises:

* values come from a CPU ``torch.Generator`` seeded with the seed, never the
  global RNG, and only from its integer draws (``randint``/``randperm``):
  floats are built as ``m * 2**e`` from random integers, which is exact in
  float64, then rounded once to the target dtype. (``randn`` goes through
  log/cos, whose vectorized CPU kernels may round differently on other CPUs.)
* every dtype-specific step is a conversion from float64 or int64, which the
  installed torch supports for all dtypes ``dtypes()`` yields; everything after
  that (special-value placement, layouts, storage offsets) is done on the raw
  bytes as uint8, then moved to the device as one contiguous uint8 buffer and
  reinterpreted there with ``view(dtype)`` and ``as_strided`` (views, no
  kernels), so even float8/uint64/bool/complex tensors need no device kernels.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from fuzzdist.errors import InvalidArgument, InvalidType
from fuzzdist.strategies._dtype_catalogue import _kind_of
from fuzzdist.strategies._seeds import _generator

LAYOUTS: tuple[str, ...] = ("contiguous", "sliced", "transposed", "channels_last")
PATTERNS: tuple[str, ...] = ("random", "constant", "special")

_MAX_STORAGE_OFFSET = 64
_LARGEST_ITEMSIZE = 16  # complex128

# Random floats are m * 2**(e - bits) with |m| < 2**bits and e in [_EXP_LO, emax]:
# magnitudes between about 2**-8 and 2**8, signs mixed, exact in float64.
_EXP_LO = -8
_EXP_HI = 8
_POW2_LO = -40  # smallest exponent the power-of-two table covers
_POW2 = torch.tensor([2.0**k for k in range(_POW2_LO, _EXP_HI + 1)], dtype=torch.float64)


# ---------------------------------------------------------------------------
# geometry


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _contiguous_strides(shape: tuple[int, ...], clamp: bool = True) -> list[int]:
    """Row-major strides. torch computes contiguous strides treating size 0
    as 1 (``clamp``), but channels_last strides from the raw sizes; the two
    only differ for empty tensors, where ``is_contiguous`` checks them."""
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * (max(shape[i + 1], 1) if clamp else shape[i + 1])
    return strides


def _layout_fits(layout: str, shape: tuple[int, ...]) -> bool:
    """Whether ``layout`` can really hold for ``shape``."""
    if layout == "transposed":
        # torch treats size-1 dims and empty tensors as contiguous whatever
        # their strides, so reversing the dims is only visible with >= 2 dims
        # of size >= 2.
        return _numel(shape) > 0 and sum(1 for s in shape if s >= 2) >= 2
    if layout == "channels_last":
        return len(shape) == 4
    return True


def _physical_permutation(layout: str, ndim: int) -> tuple[int, ...] | None:
    """For permuted layouts: the logical dims in storage order, outermost first."""
    if layout == "transposed":
        return tuple(range(ndim - 1, -1, -1))
    if layout == "channels_last":
        return (0, 2, 3, 1)  # N, H, W, C in memory; N, C, H, W logically
    return None


# ---------------------------------------------------------------------------
# values, as raw native-endian bytes (uint8), per dtype and pattern


def _float_params(dtype: torch.dtype) -> tuple[int, int]:
    """(mantissa bits, largest exponent) for random values of a float dtype."""
    info = torch.finfo(dtype)
    digits = round(-math.log2(info.eps)) + 1
    bits = min(20, digits + 2)
    emax = min(_EXP_HI, math.floor(math.log2(info.max)) - 1)
    return bits, emax


def _random_real(dtype: torch.dtype, n: int, gen: torch.Generator) -> torch.Tensor:
    if dtype == getattr(torch, "float8_e8m0fnu", None):
        # exponent-only format: positive powers of two
        exps = torch.randint(_EXP_LO, _EXP_HI + 1, (n,), generator=gen, dtype=torch.int64)
        return _POW2[exps - _POW2_LO].to(dtype)
    bits, emax = _float_params(dtype)
    mant = torch.randint(-(2**bits) + 1, 2**bits, (n,), generator=gen, dtype=torch.int64)
    exps = torch.randint(_EXP_LO, emax + 1, (n,), generator=gen, dtype=torch.int64)
    values = mant.to(torch.float64) * _POW2[exps - bits - _POW2_LO]
    return values.to(dtype)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _component_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype == torch.complex64 else torch.float64


def _random_bytes(dtype: torch.dtype, n: int, gen: torch.Generator) -> torch.Tensor:
    itemsize = dtype.itemsize
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=gen, dtype=torch.uint8)
    if dtype.is_complex:
        comp = _component_dtype(dtype)
        return _as_bytes(torch.complex(_random_real(comp, n, gen), _random_real(comp, n, gen)))
    if dtype.is_floating_point:
        return _as_bytes(_random_real(dtype, n, gen))
    # integers: uniformly random bit patterns cover the whole range
    return torch.randint(0, 256, (n * itemsize,), generator=gen, dtype=torch.uint8)


def _float_specials(dtype: torch.dtype) -> list[float]:
    """nan, +-inf, -0.0, subnormals and extremes that ``dtype`` can represent."""
    info = torch.finfo(dtype)
    candidates = [
        math.nan,
        math.inf,
        -math.inf,
        0.0,
        -0.0,
        1.0,
        -1.0,
        info.max,
        info.min,
        info.tiny,
        -info.tiny,
        info.eps,
    ]
    # subnormals, read off the bit patterns so they are exact for every format
    int_type = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
    mantissa_bits = round(-math.log2(info.eps))
    for pattern in (1, (1 << mantissa_bits) - 1):
        value = float(torch.tensor([pattern], dtype=int_type).view(dtype).to(torch.float64))
        if 0.0 < value < info.tiny:
            candidates += [value, -value]
    # keep what survives a round trip through dtype (sign of zero included)
    src = torch.tensor(candidates, dtype=torch.float64)
    back = src.to(dtype).to(torch.float64)
    kept, seen = [], set()
    for c, b in zip(candidates, back.tolist(), strict=False):
        same = (math.isnan(c) and math.isnan(b)) or (c == b and math.copysign(1.0, c) == math.copysign(1.0, b))
        key = "nan" if math.isnan(c) else repr(c)
        if same and key not in seen:
            seen.add(key)
            kept.append(c)
    return kept


@functools.cache
def _special_table(dtype: torch.dtype) -> torch.Tensor:
    """The dtype's special values, as a (k, itemsize) uint8 table."""
    if dtype == torch.bool:
        values = torch.tensor([False, True])
    elif dtype.is_complex:
        comp = _component_dtype(dtype)
        parts = _float_specials(comp)
        k = len(parts)
        real = torch.tensor(parts, dtype=torch.float64).to(comp)
        imag = torch.tensor([parts[(i + k // 2) % k] for i in range(k)], dtype=torch.float64).to(comp)
        values = torch.complex(real, imag)
    elif dtype.is_floating_point:
        values = torch.tensor(_float_specials(dtype), dtype=torch.float64).to(dtype)
    else:
        info = torch.iinfo(dtype)
        if info.min < 0:
            ints = [info.min, info.max, 0, -1, 1, info.min + 1, info.max - 1]
        else:
            ints = [0, info.max, 1, info.max - 1]
        values = torch.tensor(ints, dtype=dtype)
    return _as_bytes(values).reshape(-1, dtype.itemsize)


def _special_bytes(dtype: torch.dtype, n: int, gen: torch.Generator) -> torch.Tensor:
    table = _special_table(dtype)
    k = table.shape[0]
    # each special value appears (when n >= k), in a seed-dependent arrangement
    index = (torch.arange(n, dtype=torch.int64) % k)[torch.randperm(n, generator=gen)]
    return table[index].reshape(-1)


def _value_bytes(dtype: torch.dtype, pattern: str, n: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` values of ``dtype`` in ``pattern``, as n * itemsize uint8 bytes."""
    if pattern == "random":
        return _random_bytes(dtype, n, gen)
    if pattern == "constant":
        return _random_bytes(dtype, 1, gen).repeat(n)
    if pattern == "special":
        return _special_bytes(dtype, n, gen)
    raise InvalidArgument(f"unknown pattern {pattern!r}")


# ---------------------------------------------------------------------------
# the spec


@dataclass(frozen=True, repr=False)
class TensorSpec:
    """What a tensor looks like, without its data: small and picklable.

    ``layout`` is one of ``"contiguous"``, ``"sliced"`` (contiguous, but
    ``storage_offset`` elements into its storage), ``"transposed"`` (storage
    holds the dims in reverse order, so the tensor is not contiguous) and
    ``"channels_last"`` (4-d only). ``pattern`` is ``"random"`` (seeded),
    ``"constant"`` (every element equal) or ``"special"`` (nan, +-inf, -0.0,
    subnormals and dtype extremes where the dtype has them; integer min/max,
    0, +-1; both bools).

    ``materialize(device, seed)`` builds the tensor; the same (spec, seed)
    gives the same bytes in every process and on every device. The logical
    values depend only on (shape, dtype, pattern, seed), not on the layout.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str = "contiguous"
    pattern: str = "random"
    storage_offset: int = 0

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        if any(s < 0 for s in shape):
            raise InvalidArgument(f"negative size in shape {shape}")
        object.__setattr__(self, "shape", shape)
        if not isinstance(self.dtype, torch.dtype):
            raise InvalidType(f"dtype must be a torch.dtype, got {self.dtype!r}")
        _kind_of(self.dtype)  # raises for dtypes fuzzdist can't build
        if self.layout not in LAYOUTS:
            raise InvalidArgument(f"unknown layout {self.layout!r}; choose from {LAYOUTS}")
        if self.pattern not in PATTERNS:
            raise InvalidArgument(f"unknown pattern {self.pattern!r}; choose from {PATTERNS}")
        if not _layout_fits(self.layout, shape):
            raise InvalidArgument(f"layout {self.layout!r} can't hold for shape {shape}")
        offset = int(self.storage_offset)
        object.__setattr__(self, "storage_offset", offset)
        if self.layout == "sliced" and offset < 1:
            raise InvalidArgument("a 'sliced' spec needs storage_offset >= 1")
        if self.layout != "sliced" and offset != 0:
            raise InvalidArgument("only a 'sliced' spec has a storage_offset")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        """Number of elements (1 for a 0-d shape)."""
        return _numel(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes the tensor's elements occupy (``numel * itemsize``)."""
        return self.numel * self.dtype.itemsize

    def __repr__(self) -> str:
        parts = [repr(self.shape), str(self.dtype)]
        if self.layout != "contiguous":
            parts.append(f"layout={self.layout!r}")
        if self.pattern != "random":
            parts.append(f"pattern={self.pattern!r}")
        if self.storage_offset:
            parts.append(f"storage_offset={self.storage_offset}")
        return f"TensorSpec({', '.join(parts)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis prints dataclasses field by field unless told otherwise;
        # the short repr keeps shrunk failures readable.
        printer.text(repr(self))

    def _storage(self, seed: int) -> tuple[torch.Tensor, list[int]]:
        """(contiguous uint8 storage on CPU, logical strides in elements)."""
        gen = _generator(seed)
        itemsize = self.dtype.itemsize
        values = _value_bytes(self.dtype, self.pattern, self.numel, gen)
        perm = _physical_permutation(self.layout, self.ndim)
        if perm is None:
            storage = values
            strides = _contiguous_strides(self.shape)
            if self.layout == "sliced":
                # the elements before the view hold valid values of the same
                # pattern, so reading them by mistake shows up as wrong data
                prefix = _value_bytes(self.dtype, self.pattern, self.storage_offset, gen)
                storage = torch.cat([prefix, values])
            return storage, strides
        physical_shape = tuple(self.shape[p] for p in perm)
        storage = values.reshape(*self.shape, itemsize).permute(*perm, self.ndim).contiguous().reshape(-1)
        physical_strides = _contiguous_strides(physical_shape, clamp=self.layout != "channels_last")
        strides = [0] * self.ndim
        for position, dim in enumerate(perm):
            strides[dim] = physical_strides[position]
        return storage, strides

    def materialize(self, device: str | torch.device = "cpu", seed: int = 0) -> torch.Tensor:
        """Build the tensor on ``device`` from this spec and ``seed`` alone.

        Deterministic: the same (spec, seed) gives bitwise the same tensor in
        any process, on any rank and device. Uses a CPU ``torch.Generator``
        seeded with ``seed`` (any int), never the global RNG. The result has
        ``.shape == spec.shape``, ``.dtype == spec.dtype`` and the spec's
        layout; it is a view into a fresh storage the caller owns.
        """
        storage, strides = self._storage(seed)
        flat = storage.to(device).view(self.dtype)
        return flat.as_strided(self.shape, strides, self.storage_offset)
