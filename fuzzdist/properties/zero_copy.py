"""Zero-copy stays zero-copy: a tensor taken over a tensor's memory through an interface object
(``__array_interface__`` with numpy, ``__dlpack__``, a DLPack capsule) has the same ``data_ptr``,
shape, dtype and values as that memory, whether the memory is private or was shared by another rank
and reinterpreted with ``view(dtype)``, and a write through it reaches every rank that shares it.

Generalises torch's ``test_cupy_as_tensor.py`` (seed 001: ``torch.as_tensor`` over a
``__cuda_array_interface__`` wrapper of memory shared from another rank keeps ``data_ptr``) to host
memory: six numpy and DLPack interfaces, every dtype and layout they can represent, and any legal
``view(dtype)``, over private memory (``check``) and memory another rank shared (``check_shared``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist
import torch.utils.dlpack
from hypothesis import assume
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Kind, Problem, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.properties.shared_tensors import run_and_check_no_memory_left
from fuzzdist.strategies import seeds
from fuzzdist.toolkit.checks import first_difference
from fuzzdist.toolkit.sharing import open_tensor_handle, reduce_tensor_handles, share_tensor

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

MAX_BYTES = 16 * 1024
SEEDS = seeds()
# Every dtype and layout fuzzdist builds on CPU: which of them an interface can take is decided by
# the view dtype alias_cases() draws for it.
SPECS = fst.tensor_specs(max_bytes=MAX_BYTES)

# ---------------------------------------------------------------------------
# what each interface can represent

# numpy has no bfloat16 and no float8 types: only these dtypes can cross __array_interface__ or
# np.from_dlpack. Everything else never reaches a numpy interface, by construction of alias_cases().
_NUMPY_TYPES = {
    torch.bool: np.bool_,
    torch.uint8: np.uint8,
    torch.int8: np.int8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.complex64: np.complex64,
    torch.complex128: np.complex128,
}
for _name in ("uint16", "uint32", "uint64"):  # torch has them since 2.3
    if isinstance(getattr(torch, _name, None), torch.dtype):
        _NUMPY_TYPES[getattr(torch, _name)] = getattr(np, _name)

NUMPY_DTYPES = tuple(d for d in fst.supported_dtypes("cpu") if d in _NUMPY_TYPES)


def _dlpack_exports(dtype: torch.dtype) -> bool:
    # DLPack has codes for bool, ints, floats, bfloat16 and complex. Its float8 codes (DLPack 1.1)
    # are exported only by recent torch (2.13 exports all five float8 types). This asks whether
    # the installed torch can export the dtype at all, not whether the round trip is right (the
    # property checks that).
    try:
        torch.zeros(1, dtype=dtype).__dlpack__()
    except Exception:  # noqa: BLE001 - unsupported dtype: BufferError, RuntimeError, TypeError...
        return False
    return True


DLPACK_DTYPES = tuple(d for d in fst.supported_dtypes("cpu") if _dlpack_exports(d))


# ---------------------------------------------------------------------------
# interface objects over a tensor's memory


class ArrayInterface:
    """Host memory described by ``__array_interface__`` (version 3): the CPU counterpart of the
    ``__cuda_array_interface__`` wrapper in torch's test_cupy_as_tensor. It points at the tensor's
    first element, with its shape and byte strides, and holds the tensor so the memory outlives it."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._tensor = tensor
        self.__array_interface__ = {
            "shape": tuple(tensor.shape),
            "typestr": np.dtype(_NUMPY_TYPES[tensor.dtype]).str,
            "data": (tensor.data_ptr(), False),  # (address, read-only?)
            "strides": tuple(s * tensor.element_size() for s in tensor.stride()),
            "version": 3,
        }


class DLPackProvider:
    """An object that is not a tensor but exports one's memory through ``__dlpack__``."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._tensor = tensor

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[Any, int]:
        return self._tensor.__dlpack_device__()


def as_tensor_of_array_interface(t: torch.Tensor) -> torch.Tensor:
    """``torch.as_tensor`` of a numpy array over ``t``'s ``__array_interface__``."""
    return torch.as_tensor(np.asarray(ArrayInterface(t)))


def from_numpy_of_array_interface(t: torch.Tensor) -> torch.Tensor:
    """``torch.from_numpy`` of a numpy array over ``t``'s ``__array_interface__``."""
    return torch.from_numpy(np.asarray(ArrayInterface(t)))


def as_tensor_of_dlpack(t: torch.Tensor) -> torch.Tensor:
    """``torch.as_tensor`` of an object exporting ``t`` through ``__dlpack__``."""
    return torch.as_tensor(DLPackProvider(t))


def from_dlpack_of_dlpack(t: torch.Tensor) -> torch.Tensor:
    """``torch.from_dlpack`` of an object exporting ``t`` through ``__dlpack__``."""
    return torch.from_dlpack(DLPackProvider(t))


def from_dlpack_of_capsule(t: torch.Tensor) -> torch.Tensor:
    """``torch.from_dlpack`` of a DLPack capsule of ``t``."""
    return torch.from_dlpack(torch.utils.dlpack.to_dlpack(t))


def as_tensor_of_numpy_from_dlpack(t: torch.Tensor) -> torch.Tensor:
    """``torch.as_tensor`` of ``np.from_dlpack`` of an object exporting ``t``."""
    return torch.as_tensor(np.from_dlpack(DLPackProvider(t)))


@dataclass(frozen=True)
class Interface:
    """One way to take a tensor over another object's memory: ``convert(tensor)`` wraps the
    tensor's memory in an interface object and builds a tensor from that object."""

    name: str
    convert: Callable[[torch.Tensor], torch.Tensor]
    dtypes: tuple[torch.dtype, ...]


# By device, in shrink order. Host memory only: CUDA memory's interfaces (__cuda_array_interface__,
# cupy, DLPack on GPU, over CUDA IPC) are fuzzdist.properties.cuda_zero_copy's.
INTERFACES: dict[str, tuple[Interface, ...]] = {
    "cpu": (
        Interface("torch.as_tensor(np.asarray(__array_interface__))", as_tensor_of_array_interface, NUMPY_DTYPES),
        Interface("torch.from_numpy(np.asarray(__array_interface__))", from_numpy_of_array_interface, NUMPY_DTYPES),
        Interface("torch.as_tensor(__dlpack__)", as_tensor_of_dlpack, DLPACK_DTYPES),
        Interface("torch.from_dlpack(__dlpack__)", from_dlpack_of_dlpack, DLPACK_DTYPES),
        Interface("torch.from_dlpack(DLPack capsule)", from_dlpack_of_capsule, DLPACK_DTYPES),
        Interface("torch.as_tensor(np.from_dlpack(__dlpack__))", as_tensor_of_numpy_from_dlpack, NUMPY_DTYPES),
    ),
}


def interface(device: str, name: str) -> Interface:
    """The interface called ``name`` on ``device``."""
    for candidate in INTERFACES.get(device, ()):
        if candidate.name == name:
            return candidate
    raise InvalidArgument(
        f"no interface {name!r} on {device}; devices with interfaces: {', '.join(INTERFACES)} "
        "(CUDA memory: fuzzdist.properties.cuda_zero_copy)"
    )


# ---------------------------------------------------------------------------
# the drawn case


def view_is_legal(
    shape: tuple[int, ...], stride: tuple[int, ...], offset: int | torch.SymInt, src: torch.dtype, dst: torch.dtype
) -> bool:
    """Whether ``Tensor.view(dst)`` may reinterpret a ``src`` tensor of this geometry, by the rules
    the ``Tensor.view(dtype)`` documentation states (it is not asked: a torch that refuses a view
    these rules allow fails the property)."""
    if src.itemsize == dst.itemsize:
        return True
    if not shape or stride[-1] != 1:
        return False
    if dst.itemsize < src.itemsize:
        return True
    ratio = dst.itemsize // src.itemsize
    return shape[-1] % ratio == 0 and offset % ratio == 0 and all(s % ratio == 0 for s in stride[:-1])


@dataclass(frozen=True)
class AliasCase:
    """A tensor (``spec``), the dtype it is reinterpreted as (``view_dtype``) and the interface its
    memory goes through (by name)."""

    interface: str
    spec: fst.TensorSpec
    view_dtype: torch.dtype

    def __repr__(self) -> str:
        return f"AliasCase({self.interface!r}, {self.spec!r}, view_dtype={self.view_dtype})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@st.composite
def alias_cases(draw: st.DrawFn, device: str = "cpu", interfaces: tuple[str, ...] | None = None) -> AliasCase:
    """An interface of ``device`` (from ``interfaces`` if given), any CPU tensor spec, and a dtype
    that the interface can represent and that the tensor can legally be viewed as.

    The spec's own dtype comes first when the interface can represent it, so shrinking goes to
    "no reinterpretation". bool is a target only for bool tensors, because other bytes are not
    valid bools. Shrinks to the first interface, ``TensorSpec((1,), torch.float32)``, viewed as
    float32.
    """
    if device not in INTERFACES:
        raise InvalidArgument(
            f"alias_cases covers host memory ({', '.join(INTERFACES)}), not {device!r}; "
            "CUDA memory's interfaces are fuzzdist.properties.cuda_zero_copy's"
        )
    names = [i.name for i in INTERFACES[device] if interfaces is None or i.name in interfaces]
    chosen = interface(device, draw(st.sampled_from(names), label="interface"))
    spec = draw(SPECS, label="spec")
    # Strides and offsets in elements don't depend on the dtype: a one-byte constant tensor of the
    # same layout has them, and is cheap to build.
    geometry = dataclasses.replace(spec, dtype=torch.uint8, pattern="constant").materialize("cpu", 0)
    targets = sorted(chosen.dtypes, key=lambda d: d != spec.dtype)  # stable: own dtype first
    legal = [
        d
        for d in targets
        if (d != torch.bool or spec.dtype == torch.bool)
        and view_is_legal(spec.shape, tuple(geometry.stride()), geometry.storage_offset(), spec.dtype, d)
    ]
    assume(legal)  # never empty in practice: every itemsize has a numpy type
    view_dtype = draw(st.sampled_from(legal), label="view_dtype")
    return AliasCase(chosen.name, spec, view_dtype)


# ---------------------------------------------------------------------------
# rank functions


def _alias_problems(
    alias: torch.Tensor | Problem, tensor: torch.Tensor, expected: torch.Tensor, where: str = ""
) -> list[Problem]:
    """How ``alias`` fails to be ``tensor``'s memory holding ``expected``'s values (``where``: whose memory)."""
    if isinstance(alias, Problem):  # the conversion raised
        return [alias.about(", ".join(part for part in (where, alias.what) if part))]
    problems = []
    if alias.device != tensor.device or alias.data_ptr() != tensor.data_ptr():
        problems.append(
            Problem(
                Kind.NOTE,
                where,
                detail=f"copied: the result lives at {alias.device} "
                f"{alias.data_ptr():#x}, the memory at {tensor.device} "
                f"{tensor.data_ptr():#x}",
            )
        )
    diff = first_difference(alias, expected, ", ".join(part for part in (where, "values") if part))
    if diff is not None:
        problems.append(diff)
    return problems


def _convert(convert: Callable[[torch.Tensor], torch.Tensor], tensor: torch.Tensor) -> torch.Tensor | Problem:
    try:
        return convert(tensor)
    except Exception as exc:  # noqa: BLE001 - reported, so every rank still meets the others
        return Problem.raised(exc, "the conversion")


def alias_and_check(
    ctx: RankContext, case: AliasCase, seed: int, *, convert: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> list[Problem] | None:
    """Runs on every rank. Builds ``case.spec``'s tensor in private memory, views it as
    ``case.view_dtype``, takes a tensor over it through the interface, and compares.

    Returns None, or a list of what went wrong. ``convert`` (tensor -> tensor) replaces the case's
    interface, so tests can plant bugs.
    """
    convert = convert or interface(ctx.device.type, case.interface).convert
    tensor = case.spec.materialize(ctx.device, seed).view(case.view_dtype)
    expected = case.spec.materialize(ctx.device, seed).view(case.view_dtype)  # a second, private build
    return _alias_problems(_convert(convert, tensor), tensor, expected) or None


def write_seed_for(write_seed: int) -> int:
    """The written values' seed lies apart from the drawn seeds [0, 2**32): the written values
    never come from the stream the memory was built from, even when both drawn seeds shrink to 0,
    so a write changes the memory (unless values coincide by chance)."""
    return (1 << 40) + write_seed


def alias_shared_and_check(
    ctx: RankContext,
    case: AliasCase,
    seed: int,
    src: int,
    writer: int,
    write_seed: int,
    mode: fst.SharingStrategyMode,
    *,
    convert: Callable[[torch.Tensor], torch.Tensor] | None = None,
    share: Callable[..., Any] = reduce_tensor_handles,
    receive: Callable[..., Any] = open_tensor_handle,
) -> list[Problem] | None:
    """Runs on every rank. Rank ``src`` shares ``case.spec``'s tensor under ``mode``. Each rank
    views its tensor as ``case.view_dtype``, takes a tensor over it through the interface and
    compares. Then rank ``writer`` writes through its result, and every rank checks its result
    shows the write.

    Returns None, or a list of what went wrong, including shared memory still held after the
    example. ``convert``, ``share`` and ``receive`` are swappable, so tests can plant bugs.
    """
    convert = convert or interface(ctx.device.type, case.interface).convert
    return run_and_check_no_memory_left(
        ctx, mode, lambda: _alias_shared(ctx, case, seed, src, writer, write_seed, convert, share, receive)
    )


def _alias_shared(
    ctx: RankContext,
    case: AliasCase,
    seed: int,
    src: int,
    writer: int,
    write_seed: int,
    convert: Callable[[torch.Tensor], torch.Tensor],
    share: Callable[..., Any],
    receive: Callable[..., Any],
) -> list[Problem]:
    expected = case.spec.materialize(ctx.device, seed).view(case.view_dtype)  # private, never shared
    mine = case.spec.materialize(ctx.device, seed) if ctx.rank == src else None
    tensor = share_tensor(mine, src, ctx.group, share=share, receive=receive).view(case.view_dtype)
    del mine
    alias: Any = _convert(convert, tensor)  # Tensor | Problem; Any as mypy cannot narrow it through `writable`
    problems = _alias_problems(alias, tensor, expected, f"over memory shared by rank {src}")
    values = fst.TensorSpec(tuple(expected.shape), case.view_dtype).materialize(ctx.device, write_seed_for(write_seed))
    # write only into a result of the right shape, but enter every barrier whatever happened
    writable = isinstance(alias, torch.Tensor) and alias.shape == values.shape and alias.dtype == values.dtype
    dist.barrier(group=ctx.group)  # every rank has looked before the memory changes
    if ctx.rank == writer and writable:
        alias.copy_(values)
    dist.barrier(group=ctx.group)  # the write is done before anyone looks
    if writable and (diff := first_difference(alias, values, f"after rank {writer} wrote through its result")):
        problems.append(diff)
    return problems


# ---------------------------------------------------------------------------
# driver-side checks


def _wrong(problems: list[Any]) -> dict[int, Any]:
    return {rank: p for rank, p in enumerate(problems) if p is not None}


def check(
    pool: Pool,
    case: AliasCase,
    seed: int,
    *,
    convert: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> None:
    """Take a tensor over ``case``'s private memory on every rank, through the case's interface
    (or ``convert``); raise :class:`PropertyFailure` if any result is a copy or has other values."""
    problems = pool.run(alias_and_check, case, seed, convert=convert)
    if wrong := _wrong(problems):
        raise PropertyFailure(f"{case}:{by_rank(wrong)}", problems)


def check_shared(
    pool: Pool,
    case: AliasCase,
    seed: int,
    src: int,
    writer: int,
    write_seed: int,
    mode: fst.SharingStrategyMode,
    *,
    convert: Callable[[torch.Tensor], torch.Tensor] | None = None,
    share: Callable[..., Any] = reduce_tensor_handles,
    receive: Callable[..., Any] = open_tensor_handle,
) -> None:
    """Share ``case``'s tensor from rank ``src`` under ``mode``, take a tensor over it on every
    rank, let ``writer`` write through its result; raise :class:`PropertyFailure` if a result is
    a copy, has other values, misses the write, or shared memory outlives the example."""
    problems = pool.run(
        alias_shared_and_check, case, seed, src, writer, write_seed, mode, convert=convert, share=share, receive=receive
    )
    if wrong := _wrong(problems):
        raise PropertyFailure(
            f"{case}, shared from rank {src} under {mode}, written by {writer}:{by_rank(wrong)}", problems
        )
