"""Zero-copy stays zero-copy on CUDA: ``torch.as_tensor`` over ``__cuda_array_interface__`` (the seed
test's wrapper and real cupy arrays) and DLPack give a tensor with the same ``data_ptr`` and values,
also over memory shared from another rank and reinterpreted with ``view(dtype)``.

Generalises torch's ``test_cupy_as_tensor.py`` (seed 001: one wrapper over memory from rank 1,
expandable segments on) to any size, any view dtype, any source, both device spellings, DLPack and
real cupy arrays, and every allocator mode.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import InvalidArgument
from fuzzdist.problems import Kind, Problem, by_rank
from fuzzdist.properties import PropertyFailure
from fuzzdist.toolkit.checks import first_difference
from fuzzdist.toolkit.cuda_ipc import CudaArrayInterface, ipc_allocator_modes, open_cuda_handle, reduce_cuda_handles
from fuzzdist.toolkit.sharing import share_tensor

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

UNITS = st.integers(0, 4096)  # the shared memory's size in 8-byte units (a multiple of every view dtype's size)
SEEDS = fst.seeds()
MODES = st.deferred(ipc_allocator_modes)  # deferred: the modes depend on the GPU, probed when drawn
VIEW_DTYPES = (torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.float64, torch.int64)


def _as_tensor(obj: Any, device: str | torch.device) -> torch.Tensor:
    return torch.as_tensor(obj, device=device)


INTERFACE_SETS = ("torch", "cupy")  # each its own test: a missing cupy is a visible skip, never a silent drop


def _torch_views(
    shared: torch.Tensor, ptr: int, nbytes: int, view_dtype: torch.dtype, index: int, as_tensor: Callable[..., Any]
) -> dict[str, torch.Tensor]:
    views = {}
    wrapper = CudaArrayInterface(ptr, (nbytes,))
    for device in ("cuda", f"cuda:{index}"):
        views[f"__cuda_array_interface__ device={device}"] = as_tensor(wrapper, device).view(view_dtype)
    views["dlpack"] = torch.from_dlpack(shared.view(view_dtype))
    return views


def _cupy_views(
    shared: torch.Tensor, ptr: int, nbytes: int, view_dtype: torch.dtype, index: int, as_tensor: Callable[..., Any]
) -> dict[str, torch.Tensor]:
    import cupy  # the test asked for cupy (needs("cupy")): a cupy that fails here fails the example

    memory = cupy.cuda.UnownedMemory(ptr, nbytes, shared, index)
    array = cupy.ndarray((nbytes,), cupy.uint8, cupy.cuda.MemoryPointer(memory, 0))
    return {
        "cupy __cuda_array_interface__": as_tensor(array, f"cuda:{index}").view(view_dtype),
        "cupy dlpack": torch.from_dlpack(array).view(view_dtype),
    }


def zero_copy_views(
    ctx: RankContext,
    nbytes: int,
    view_dtype: torch.dtype,
    src: int,
    seed: int,
    mode: fst.CudaAllocatorMode,
    as_tensor: Callable[..., Any] = _as_tensor,
    interfaces: str = "torch",
) -> list[Problem]:
    """On every rank: view memory shared from ``src`` through each interface of the set ``interfaces``
    (``"torch"``: the seed's wrapper and DLPack; ``"cupy"``: real cupy arrays); report every copy."""
    if interfaces not in INTERFACE_SETS:
        raise InvalidArgument(f"interfaces must be one of {INTERFACE_SETS}, got {interfaces!r}")
    problems: list[Problem] = []
    with mode.applied():
        base = None
        if ctx.rank == src:
            base = fst.TensorSpec((nbytes,), torch.uint8).materialize(ctx.device, seed)
        receive = functools.partial(open_cuda_handle, device_index=ctx.device.index)
        shared = (
            share_tensor(base, src, ctx.group, share=reduce_cuda_handles, receive=receive)
            if ctx.world_size > 1
            else base
        )
        assert shared is not None  # one rank: it is the source
        expected = fst.TensorSpec((nbytes,), torch.uint8).materialize("cpu", seed).view(view_dtype)
        ptr = shared.data_ptr()
        make = _torch_views if interfaces == "torch" else _cupy_views
        views = make(shared, ptr, nbytes, view_dtype, ctx.device.index, as_tensor)
        for name, view in views.items():
            if nbytes and view.data_ptr() != ptr:
                problems.append(
                    Problem(
                        Kind.NOTE, name, detail=f"copied (data_ptr {view.data_ptr():#x}, shared memory at {ptr:#x})"
                    )
                )
            diff = first_difference(view, expected, name)
            if diff:
                problems.append(diff)
        torch.cuda.synchronize(ctx.device)
        del views, shared, base  # every rank lets go inside the mode, before the source frees the memory
        torch.distributed.barrier(group=ctx.group)
    return problems


def check(
    pool: Pool,
    nbytes: int,
    view_dtype: torch.dtype,
    src: int,
    seed: int,
    mode: fst.CudaAllocatorMode,
    *,
    as_tensor: Callable[..., Any] = _as_tensor,
    interfaces: str = "torch",
) -> None:
    """View ``nbytes`` of CUDA memory shared from rank ``src`` (under allocator ``mode``) as
    ``view_dtype`` through every interface of ``interfaces`` (``"torch"`` or ``"cupy"``), with
    ``as_tensor`` for the ``__cuda_array_interface__`` ones; raise :class:`PropertyFailure` with every
    rank's problems if any view copies or differs."""
    problems = pool.run(
        zero_copy_views, nbytes, view_dtype, src, seed, mode, as_tensor=as_tensor, interfaces=interfaces
    )
    if problems != [[]] * pool.world_size:
        raise PropertyFailure(f"views copied or differ:{by_rank(dict(enumerate(problems)))}", problems)
