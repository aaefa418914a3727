"""What this machine can run, asked before any rank process is spawned.

Each probe answers ``None`` when the capability is there and otherwise a
sentence that says what is missing and what to do; the pool raises it as an
error and the pytest plugin turns it into a skip reason.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

DEVICES = ("cpu", "cuda")
T = TypeVar("T")

# Element types gloo carries (ProcessGroupGloo's type dispatch; complex travels as real pairs where
# torch's Python layer views it so).  Not int16, not uint16/32/64, not float8: gloo raises "Invalid
# scalar type" for those.  The most any gloo path carries: send/recv (which move bytes, and view complex
# as real) carry all of them on every torch fuzzdist was run on (2.6.0, 2.13.0, 2.14.1), and the p2p
# property draws them all.  Whether the collectives carry complex depends on the torch: see gloo_dtypes.
GLOO_DTYPES = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
    torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool,
)

# What gloo_dtypes answers for: c10d's broadcast, the functional collectives (their all_reduce stands for
# them all), DTensor's distribute_tensor and redistribute.
GLOO_APIS = ("broadcast", "functional", "dtensor")

# The ReduceOps gloo_reduce_ops answers within, in shrink order: SUM first.  PREMUL_SUM is left out: it
# is documented for NCCL only, and takes a factor (``_make_nccl_premul_sum``).
GLOO_REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")

# What gloo_reduce_ops answers for: c10d's all_reduce and reduce, and the functional all_reduce.
GLOO_REDUCE_APIS = ("all_reduce", "reduce", "functional")

# The functional collectives functional_layouts answers for (those the installed torch has), and the memory
# layouts it answers within (fuzzdist.strategies.LAYOUTS: "sliced" is contiguous at a storage offset).
FUNCTIONAL_OPS = ("all_reduce", "all_gather_single", "all_gather_tensor", "reduce_scatter_single",
                  "reduce_scatter_tensor", "broadcast", "all_to_all_single")
FUNCTIONAL_LAYOUTS = ("contiguous", "sliced", "transposed", "channels_last")

# Run in a fresh interpreter: a world-size-1 gloo group (a HashStore, nothing on disk or network) tries
# each dtype through each API of GLOO_APIS, each ReduceOp over each dtype through each API of
# GLOO_REDUCE_APIS, and each layout through each functional collective, and prints what each took, as
# JSON: {"dtypes": {api: [dtype]}, "reduce_ops": {api: {dtype: [op]}}, "functional_layouts": {op:
# [layout]}}.  Gloo and the functional collectives check the element type, the op and the layout at any
# world size: at world size 1 they refuse what they refuse at 2 (compared on torch 2.6.0 and 2.13.0;
# tests/pool/test_capabilities.py checks it against a world of 2).
_GLOO_PROBE = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import torch, torch.distributed as dist
names, ops = sys.argv[1].split(","), sys.argv[2].split(",")
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
group = dist.group.WORLD
def took(call, *args):
    try:
        call(*args)
        return True
    except (RuntimeError, ValueError, TypeError):
        return False
def took_or_asserted(call, *args):
    try:
        return took(call, *args)
    except AssertionError:
        return False
def calls():
    yield "broadcast", lambda t: dist.broadcast(t, 0)
    import torch.distributed._functional_collectives as fc
    yield "functional", lambda t: fc.wait_tensor(fc.all_reduce(t, "sum", group))
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    except ImportError:
        from torch.distributed._tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (1,))
    yield "dtensor", lambda t: distribute_tensor(t, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).full_tensor()
def reductions():
    yield "all_reduce", lambda t, op: dist.all_reduce(t, getattr(dist.ReduceOp, op))
    yield "reduce", lambda t, op: dist.reduce(t, 0, getattr(dist.ReduceOp, op))
    import torch.distributed._functional_collectives as fc
    yield "functional", lambda t, op: fc.wait_tensor(fc.all_reduce(t, op.lower(), group))
out = {"dtypes": {}, "reduce_ops": {}}
try:
    for api, call in calls():
        out["dtypes"][api] = [n for n in names if took(call, torch.zeros(4, dtype=getattr(torch, n)))]
except ImportError:
    pass  # an API this torch lacks: no answer for it
try:
    for api, call in reductions():
        out["reduce_ops"][api] = {n: [op for op in ops if took(call, torch.zeros(4, dtype=getattr(torch, n)), op)]
                                  for n in names}
except ImportError:
    pass
def layouts():
    yield "contiguous", torch.zeros(2, 2, 2, 2)
    yield "sliced", torch.zeros(17)[1:].view(2, 2, 2, 2)
    yield "transposed", torch.zeros(2, 2, 2, 2).transpose(0, 1)
    yield "channels_last", torch.zeros(2, 2, 2, 2).to(memory_format=torch.channels_last)
def functional_calls():
    import torch.distributed._functional_collectives as fc
    for op in sys.argv[3].split(","):
        fn = getattr(fc, op, None)
        if fn is None:
            continue  # an op this torch lacks: no answer for it
        if op == "all_reduce":
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, "sum", group))
        elif op.startswith("all_gather"):
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, 0, group))
        elif op.startswith("reduce_scatter"):
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, "sum", 0, group))
        elif op == "broadcast":
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, 0, group))
        else:
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, None, None, group))
out["functional_layouts"] = {}
try:
    for op, call in functional_calls():
        # AssertionError too: torch 2.6.0's all_gather_tensor asserts a contiguous input
        out["functional_layouts"][op] = [name for name, t in layouts() if took_or_asserted(call, t)]
except ImportError:
    pass
print(json.dumps(out))
"""


@functools.cache
def gloo_dtypes(api: str) -> tuple[torch.dtype, ...]:
    """The dtypes of :data:`GLOO_DTYPES` (in its order) that ``api``, one of :data:`GLOO_APIS`, carries
    over gloo in the installed torch: what a property over that API draws.

    Asked of torch, not assumed from its version: gloo refuses complex in ``dist.broadcast``,
    ``reduce_scatter_tensor``, the functional collectives and DTensor on torch 2.6.0 ("Invalid scalar
    type"; none of them is documented there to take complex), and takes it on 2.13.0 and 2.14.1.  One
    probe in a subprocess (:data:`_GLOO_PROBE`, about 2 s, shared with :func:`gloo_reduce_ops` and
    :func:`functional_layouts`), run on the first call and kept for the process.  Where the probe gives
    no answer, the answer is all of ``GLOO_DTYPES`` with a warning: a refused dtype then shows as a
    property's failure, never as inputs silently left out.
    """
    if api not in GLOO_APIS:
        from fuzzdist.errors import InvalidArgument

        raise InvalidArgument(f"unknown API {api!r} for gloo_dtypes; known: {', '.join(GLOO_APIS)}")
    answer = _probe_gloo_dtypes().get(api)
    if not answer:
        import warnings

        warnings.warn(f"could not ask torch {torch.__version__} which dtypes gloo's {api} takes "
                      f"({_PROBE_FAILURE.get('why', f'the probe had no answer for {api}')}); "
                      "drawing every dtype gloo's type dispatch has", stacklevel=2)
        return GLOO_DTYPES
    return tuple(d for d in GLOO_DTYPES if _dtype_name(d) in answer)


@functools.cache
def gloo_reduce_ops(api: str, dtype: torch.dtype) -> tuple[str, ...]:
    """The ReduceOp names of :data:`GLOO_REDUCE_OPS` (in its order, SUM first) that ``api``, one of
    :data:`GLOO_REDUCE_APIS`, takes over gloo for tensors of ``dtype`` in the installed torch: what a
    property reducing with that API draws.  Empty where gloo refuses ``dtype`` there altogether.

    Asked of torch, not assumed from its version: torch 2.6.0's gloo refuses AVG ("Cannot use
    ReduceOp.AVG with Gloo"; its ``ReduceOp`` docstring says AVG "is only available with the NCCL
    backend", as later ones still do), 2.13.0's and 2.14.1's take it for floating and complex dtypes.
    Every version refuses AVG over integers and bool, PRODUCT/MIN/MAX over complex ("not supported for
    complex tensors", the docstring says) and the bitwise ops over floating dtypes.  The same probe
    subprocess as :func:`gloo_dtypes`, run once per process.  Where it gives no answer, the answer is
    the ops gloo took on the newest torch fuzzdist was run on, with a warning: a refused op then shows as
    a property's failure, never as inputs silently left out.
    """
    if api not in GLOO_REDUCE_APIS:
        from fuzzdist.errors import InvalidArgument

        raise InvalidArgument(f"unknown API {api!r} for gloo_reduce_ops; known: {', '.join(GLOO_REDUCE_APIS)}")
    if not isinstance(dtype, torch.dtype):
        from fuzzdist.errors import InvalidArgument

        raise InvalidArgument(f"gloo_reduce_ops takes a torch.dtype, got {dtype!r}")
    answer = _probe_gloo_reduce_ops().get(api)
    if not answer:
        import warnings

        warnings.warn(f"could not ask torch {torch.__version__} which ReduceOps gloo's {api} takes "
                      f"({_PROBE_FAILURE.get('why', f'the probe had no answer for {api}')}); "
                      "drawing the ones gloo took on torch 2.13", stacklevel=2)
        return _unprobed_reduce_ops(dtype)
    taken = answer.get(_dtype_name(dtype), [])
    return tuple(op for op in GLOO_REDUCE_OPS if op in taken)


def _unprobed_reduce_ops(dtype: torch.dtype) -> tuple[str, ...]:
    """What gloo took on torch 2.13.0 per kind of dtype: the answer where the probe gave none."""
    if dtype.is_complex:
        return ("SUM", "AVG")
    if dtype.is_floating_point:
        return ("SUM", "AVG", "PRODUCT", "MIN", "MAX")
    return ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


@functools.cache
def functional_layouts(op: str) -> tuple[str, ...]:
    """The memory layouts of :data:`FUNCTIONAL_LAYOUTS` (in its order) that the installed torch's functional
    collective ``op`` (one of :data:`FUNCTIONAL_OPS`) takes as its input over gloo: what a property issuing
    it draws.  Ask only of an op the installed torch has (torch 2.6.0 has no ``all_gather_single``).

    Asked of torch, not assumed from its version: torch 2.6.0's ``all_gather_tensor`` asserts that its
    input is contiguous (``assert self.is_contiguous()``; its docstring says nothing of layouts), and
    takes the contiguous layouts only; 2.13.0's functional collectives take every layout.  The same probe
    subprocess as :func:`gloo_dtypes`, run once per process.  Where it gives no answer, the answer is
    every layout, with a warning: a refused layout then shows as a property's failure, never as inputs
    silently left out.
    """
    if op not in FUNCTIONAL_OPS:
        from fuzzdist.errors import InvalidArgument

        raise InvalidArgument(f"unknown functional collective {op!r} for functional_layouts; known: "
                              f"{', '.join(FUNCTIONAL_OPS)}")
    answer = _probe_gloo().get("functional_layouts")
    taken = answer.get(op) if isinstance(answer, dict) else None
    if not isinstance(taken, list):
        import warnings

        warnings.warn(f"could not ask torch {torch.__version__} which layouts its functional {op} takes "
                      f"({_PROBE_FAILURE.get('why', f'the probe had no answer for {op}')}); "
                      "drawing every layout", stacklevel=2)
        return FUNCTIONAL_LAYOUTS
    return tuple(layout for layout in FUNCTIONAL_LAYOUTS if layout in taken)


_PROBE_FAILURE: dict[str, str] = {}  # why the last probe gave no answer, for the warning


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@functools.cache
def _probe_gloo() -> dict[str, Any]:
    """Run :data:`_GLOO_PROBE` once: its JSON answer ({} where it failed, the reason in _PROBE_FAILURE)."""
    import json

    names = ",".join(_dtype_name(d) for d in GLOO_DTYPES)
    try:
        # the timeout: it imports torch, generous for a loaded machine
        done = subprocess.run([sys.executable, "-c", _GLOO_PROBE, names, ",".join(GLOO_REDUCE_OPS),
                               ",".join(FUNCTIONAL_OPS)],
                              capture_output=True, text=True, timeout=180)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, OSError, ValueError, IndexError) as exc:
        stderr = getattr(locals().get("done"), "stderr", "") or ""
        _PROBE_FAILURE["why"] = f"{type(exc).__name__}: {exc}; {stderr.strip()[-300:]}".rstrip("; ")
        return {}
    if not isinstance(answer, dict):
        _PROBE_FAILURE["why"] = f"the probe printed {answer!r}"
        return {}
    return answer


def _probe_gloo_dtypes() -> dict[str, list[str]]:
    """The probe's dtypes: API name -> the dtype names it took ({} where the probe failed)."""
    answer = _probe_gloo().get("dtypes")
    if not isinstance(answer, dict):
        return {}
    return {str(k): [str(n) for n in v] for k, v in answer.items() if isinstance(v, list)}


def _probe_gloo_reduce_ops() -> dict[str, dict[str, list[str]]]:
    """The probe's ReduceOps: API name -> dtype name -> the op names it took ({} where the probe failed)."""
    answer = _probe_gloo().get("reduce_ops")
    if not isinstance(answer, dict):
        return {}
    return {str(api): {str(n): [str(op) for op in ops] for n, ops in per_dtype.items() if isinstance(ops, list)}
            for api, per_dtype in answer.items() if isinstance(per_dtype, dict)}


def validate_pool_args(world_size: object, backend: object, device: object, timeout: object,
                       local: bool = True) -> None:
    """Raise InvalidArgument (a ValueError)/CapabilityError for arguments no pool could run with.

    ``local``: the ranks are to be started on this machine (a RankPool), so their number is bounded by
    what it holds (:func:`too_many_ranks`); False under torchrun, whose processes exist already.
    """
    from fuzzdist.errors import CapabilityError, InvalidArgument

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InvalidArgument(f"world_size must be a positive int (the number of ranks), got {world_size!r}")
    if local and (reason := too_many_ranks(world_size)):
        raise InvalidArgument(f"world_size={world_size}: {reason}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise InvalidArgument(f"timeout must be a positive number of seconds, got {timeout!r}")
    if device not in DEVICES:
        raise InvalidArgument(f"unknown device {device!r}: use one of {', '.join(map(repr, DEVICES))}")
    if not isinstance(backend, str):
        raise InvalidArgument(f"backend must be a string such as 'gloo' or 'nccl', got {backend!r}")
    reason = missing_distributed()
    if reason:
        raise CapabilityError(reason)
    reason = missing_backend(backend)
    if reason:
        raise InvalidArgument(reason)
    if backend == "nccl" and device != "cuda":
        raise InvalidArgument("backend 'nccl' runs collectives on CUDA tensors only: pass device='cuda', "
                         "or use backend='gloo' for CPU ranks")
    if device == "cuda":
        reason = missing_gpus(1)
        if reason:
            raise CapabilityError(f"device='cuda' {reason}; use device='cpu'")
        if backend == "nccl":
            reason = missing_gpus(world_size)
            if reason:
                raise CapabilityError(
                    f"backend 'nccl' needs one GPU per rank: world_size={world_size} but {reason}. "
                    "Use backend='gloo' to run several ranks on one GPU, or lower the world size.")


RANK_MEMORY_BYTES = 250 * 2**20  # about what one rank process holds: torch, hypothesis and fuzzdist loaded
# (227 MiB measured on torch 2.13, CPU, before its first example)


def too_many_ranks(world_size: int) -> str | None:
    """Why this machine can't hold ``world_size`` rank processes at once (a sentence saying how many it
    can), or None.  Counted from the machine's memory, at :data:`RANK_MEMORY_BYTES` a rank, the driver
    as one more: past it the machine swaps or its out-of-memory killer takes the driver (a thousand
    ranks once started 140 processes before that).  The whole memory, not what is free now, so that
    the bound is the machine's and the same on every run."""
    memory = _machine_memory()
    if memory is None:
        return None
    most = max(1, memory // RANK_MEMORY_BYTES - 1)
    if world_size <= most:
        return None
    return (f"this machine can hold about {most} rank processes ({memory / 2**30:.1f} GiB of memory, "
            f"about {RANK_MEMORY_BYTES // 2**20} MiB a rank): pass at most {most}, or spread the ranks "
            "over several machines with torchrun")


def _machine_memory() -> int | None:
    """Bytes of memory this machine has, or None where unknown."""
    import os

    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def missing_distributed() -> str | None:
    """Why torch.distributed can't be used in this torch build, or None."""
    import torch.distributed as dist

    if not dist.is_available():
        return f"torch {torch.__version__} was built without torch.distributed"
    return None


def available_backends() -> list[str]:
    """The process group backends this torch build has (gloo, nccl, mpi, ucc, xccl)."""
    import torch.distributed as dist

    names = [b for b in ("gloo", "nccl", "mpi", "ucc", "xccl") if _backend_available(dist, b)]
    extra = [b for b in getattr(dist.Backend, "backend_list", []) if b not in names and b != "undefined"]
    return names + [b for b in extra if _backend_available(dist, b)]


def missing_backend(backend: str) -> str | None:
    """Why ``backend`` can't be used here (with the backends that can), or None."""
    if backend in available_backends():
        return None
    return (f"backend {backend!r} is not available in torch {torch.__version__}; "
            f"available: {', '.join(available_backends()) or 'none'}. "
            "Use 'gloo' for CPU ranks (and for several ranks sharing one GPU).")


def missing_gpus(count: int) -> str | None:
    """None if at least ``count`` CUDA devices are visible, else why not."""
    if not torch.backends.cuda.is_built():
        return f"needs CUDA, but torch {torch.__version__} is a build without CUDA"
    found = torch.cuda.device_count()
    if found == 0:
        return "needs CUDA, but no GPU is visible (torch.cuda.device_count() == 0; check CUDA_VISIBLE_DEVICES)"
    if found < count:
        return f"needs {count} GPUs, but {found} {'is' if found == 1 else 'are'} visible"
    return None


def _backend_available(dist: Any, name: str) -> bool:
    probe = getattr(dist, "is_backend_available", None)
    if probe is not None:
        try:
            return bool(probe(name))
        except Exception:
            return False
    return bool(getattr(dist, f"is_{name}_available", lambda: False)())


# -- probes for the GPU properties ------------------------------------------------
# Each answers None when the capability is there, else why not.  The `needs`
# marker (see plugin.py) turns them into skip reasons before any rank runs.

_PIDFD_PROBE = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid, fd = int(sys.argv[1]), int(sys.argv[2])
pidfd = libc.syscall(434, pid, 0)          # pidfd_open
if pidfd < 0:
    print("pidfd_open", os.strerror(ctypes.get_errno())); sys.exit()
got = libc.syscall(438, pidfd, fd, 0)      # pidfd_getfd
print("ok" if got >= 0 else "pidfd_getfd " + os.strerror(ctypes.get_errno()))
"""

_HOLDER = "import os, sys; fd = os.open(os.devnull, os.O_RDONLY); print(fd, flush=True); sys.stdin.read()"


@functools.cache
def missing_pidfd_getfd() -> str | None:
    """Can one process take another's file descriptor with pidfd_getfd?

    CUDA IPC of expandable segments needs it, between sibling processes as
    rank processes are; containers that restrict ptrace refuse it
    ("pidfd_getfd: Operation not permitted").  Probed for real between two
    sibling processes, in at most a few seconds.
    """
    if not sys.platform.startswith("linux"):
        return "needs pidfd_getfd, which only Linux has"
    try:
        holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
    except OSError as exc:
        return f"could not start the pidfd_getfd probe: {exc}"
    try:
        assert holder.stdout is not None  # stdout=PIPE above
        fd = holder.stdout.readline().strip()
        probe = subprocess.run([sys.executable, "-c", _PIDFD_PROBE, str(holder.pid), fd],
                               capture_output=True, text=True, timeout=30)
        answer = probe.stdout.strip() or probe.stderr.strip()[-200:]
    except (subprocess.TimeoutExpired, OSError) as exc:
        answer = f"probe failed: {exc}"
    finally:
        holder.kill()
        holder.wait(5)
    if answer == "ok":
        return None
    return (f"needs pidfd_getfd between sibling processes (expandable-segment CUDA IPC), but {answer}; "
            "allow ptrace between the user's processes (container: --cap-add SYS_PTRACE) "
            "or run without expandable segments")


def missing_peer_access(world_size: int) -> str | None:
    """Can every pair of the GPUs that world_size ranks use access each other's memory?"""
    reason = missing_gpus(1)
    if reason:
        return reason
    count = torch.cuda.device_count()
    used = sorted({r % count for r in range(world_size)})
    for i in used:
        for j in used:
            if i != j and not torch.cuda.can_device_access_peer(i, j):
                return f"needs peer access between GPUs {i} and {j}, which this node does not allow"
    return None


# The pip extra that installs the cupy build for each CUDA major version (pyproject.toml).
CUPY_EXTRAS = {12: "gpu", 13: "gpu-cuda13"}


def cupy_install_hint(cuda_major: int | None) -> str:
    """What to install for cupy to match a torch built with CUDA ``cuda_major`` (None: unknown)."""
    extra = CUPY_EXTRAS.get(cuda_major) if cuda_major is not None else None
    if extra is not None:
        return f"install fuzzdist[{extra}] (cupy-cuda{cuda_major}x, for torch's CUDA {cuda_major})"
    choices = " or ".join(f"fuzzdist[{e}] (CUDA {m})" for m, e in sorted(CUPY_EXTRAS.items()))
    return f"install fuzzdist[gpu] or the cupy build for your CUDA: {choices}"


def _torch_cuda_major() -> int | None:
    version = torch.version.cuda
    if not version:
        return None
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def missing_cupy() -> str | None:
    """Why cupy can't be used here, or None: not installed, failing to import (any exception: a
    cupy for another CUDA can raise more than ImportError), built for another CUDA major version
    than torch's (``torch.version.cuda``), or seeing no GPU.  Says which extra to install."""
    torch_major = _torch_cuda_major()
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - any failure to import means no usable cupy
        return f"needs cupy, but importing it failed ({type(exc).__name__}: {exc}); {cupy_install_hint(torch_major)}"
    try:
        runtime = int(cupy.cuda.runtime.runtimeGetVersion())  # e.g. 12080 for CUDA 12.8
    except Exception as exc:  # noqa: BLE001 - cupy without a usable CUDA runtime
        return f"needs a working cupy, but it can't tell its CUDA runtime version: {exc}"
    cupy_major = runtime // 1000
    if torch_major is None:
        return f"needs cupy next to a CUDA torch, but torch {torch.__version__} is a build without CUDA"
    if cupy_major != torch_major:
        return (f"needs cupy built for torch's CUDA {torch.version.cuda}, but the installed cupy uses CUDA "
                f"{cupy_major}.{runtime % 1000 // 10}; {cupy_install_hint(torch_major)}")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - cupy without a usable driver
        return f"needs a working cupy, but it can't see a GPU: {exc}"
    return None


def missing_block_current_stream() -> str | None:
    """Why ``Work.block_current_stream()`` can't be used with the installed torch, or None."""
    import torch.distributed as dist

    work = getattr(dist.distributed_c10d, "Work", None) or getattr(dist, "_Work", None)
    if work is None or not hasattr(work, "block_current_stream"):
        return f"needs Work.block_current_stream, which torch {torch.__version__} does not have"
    return None


def missing_expandable_segments() -> str | None:
    """Can this torch turn expandable segments on at run time?"""
    reason = missing_gpus(1)
    if reason:
        return reason
    memory = torch.cuda.memory
    if not (hasattr(torch._C, "_accelerator_setAllocatorSettings") or hasattr(memory, "_set_allocator_settings")):
        return f"needs run-time allocator settings, which torch {torch.__version__} does not have"
    return None


def missing_fully_shard() -> str | None:
    """Why FSDP2's ``fully_shard`` can't be used on CPU ranks with the installed torch (older than 2.6: no
    fully_shard; 2.6: none on CPU), or None."""
    if importlib.util.find_spec("torch.distributed.fsdp") is None:
        return f"needs torch.distributed.fsdp.fully_shard, which torch {torch.__version__} does not have"
    import torch.distributed.fsdp as fsdp

    if not hasattr(fsdp, "fully_shard"):
        return f"needs torch.distributed.fsdp.fully_shard, which torch {torch.__version__} does not have"
    # fuzzdist's FSDP properties run on CPU ranks; fully_shard's all-gather records an event on the device's
    # stream, and torch 2.6's CPU stream has no record_event (fully_shard's docs there are silent on CPU)
    if not hasattr(getattr(torch.cpu, "Stream", None), "record_event"):
        return (f"needs fully_shard on CPU ranks, which torch {torch.__version__} can't run: its all-gather "
                "calls the CPU stream's record_event, which this torch does not have")
    return None


def missing_functional_collectives() -> str | None:
    """Why ``torch.distributed._functional_collectives`` can't be used with the installed torch, or None."""
    if importlib.util.find_spec("torch.distributed._functional_collectives") is None:
        return f"needs torch.distributed._functional_collectives, which torch {torch.__version__} does not have"
    return None


def missing_distributed_nn() -> str | None:
    """Why ``torch.distributed.nn`` (autograd-aware collectives) can't be used with the installed torch, or None."""
    if importlib.util.find_spec("torch.distributed.nn") is None:
        return f"needs torch.distributed.nn, which torch {torch.__version__} does not have"
    return None


PROBES: dict[str, Callable[[], str | None]] = {
    "cuda": lambda: missing_gpus(1),
    "pidfd_getfd": missing_pidfd_getfd,
    "cupy": missing_cupy,
    "block_current_stream": missing_block_current_stream,
    "expandable_segments": missing_expandable_segments,
    "fully_shard": missing_fully_shard,
    "functional_collectives": missing_functional_collectives,
    "distributed_nn": missing_distributed_nn,
}


def missing(*names: str) -> str | None:
    """The first reason any of the named capabilities is missing, or None.  See PROBES."""
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        from fuzzdist.errors import InvalidArgument

        raise InvalidArgument(f"unknown capabilities {unknown}; known: {', '.join(PROBES)}")
    for name in names:
        reason = PROBES[name]()
        if reason:
            return reason
    return None


# -- what a pool's ranks support, probed on them once ------------------------------------------------

# pool -> probe key -> the probe's answer, or the CapabilityError it raised.  Kept per pool object (a
# pool restarted after a crash keeps its answers: same torch, same backend), gone with the pool.
_POOL_ANSWERS: weakref.WeakKeyDictionary[Any, dict[Hashable, Any]] = weakref.WeakKeyDictionary()


def probed_once(pool: Any, key: Hashable, probe: Callable[[], T]) -> T:
    """``probe()``'s answer for ``pool`` and ``key``, computed on the first call and then kept.

    For what only the ranks can tell (which dtypes and ops the installed backend takes): ``probe``
    usually runs a probe function on the pool's ranks.  A :class:`~fuzzdist.errors.CapabilityError` it
    raises is kept too and raised again on every call: the pytest plugin turns it into a skip of the
    calling test, with its message as the reason."""
    from fuzzdist.errors import CapabilityError

    answers = _POOL_ANSWERS.setdefault(pool, {})
    if key not in answers:
        try:
            answers[key] = probe()
        except CapabilityError as exc:
            answers[key] = exc
    answer = answers[key]
    if isinstance(answer, CapabilityError):
        raise answer
    return answer
