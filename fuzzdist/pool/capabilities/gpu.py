"""What the GPU properties need: visible GPUs, peer access, CUDA IPC between siblings, run-time allocator
settings, and a cupy built for torch's CUDA.

Each probe answers None when the capability is there, else a sentence that says what is missing and
what to do.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import torch


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


# Run by missing_pidfd_getfd in a fresh interpreter, without torch or fuzzdist: the probe takes the
# holder's file descriptor with pidfd_open and pidfd_getfd (syscalls 434 and 438), and says how that went.
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

# The sibling whose descriptor the probe takes: it opens one, says which, and waits for its stdin to close.
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
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    except OSError as exc:
        return f"could not start the pidfd_getfd probe: {exc}"
    try:
        assert holder.stdout is not None  # stdout=PIPE above
        fd = holder.stdout.readline().strip()
        probe = subprocess.run(
            [sys.executable, "-c", _PIDFD_PROBE, str(holder.pid), fd], capture_output=True, text=True, timeout=30
        )
        answer = probe.stdout.strip() or probe.stderr.strip()[-200:]
    except (subprocess.TimeoutExpired, OSError) as exc:
        answer = f"probe failed: {exc}"
    finally:
        holder.kill()
        holder.wait(5)
    if answer == "ok":
        return None
    return (
        f"needs pidfd_getfd between sibling processes (expandable-segment CUDA IPC), but {answer}; "
        "allow ptrace between the user's processes (container: --cap-add SYS_PTRACE) "
        "or run without expandable segments"
    )


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


def missing_expandable_segments() -> str | None:
    """Can this torch turn expandable segments on at run time?"""
    reason = missing_gpus(1)
    if reason:
        return reason
    memory = torch.cuda.memory
    if not (hasattr(torch._C, "_accelerator_setAllocatorSettings") or hasattr(memory, "_set_allocator_settings")):
        return f"needs run-time allocator settings, which torch {torch.__version__} does not have"
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
    """The major version of the CUDA torch was built with, or None for a build without CUDA."""
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
        return (
            f"needs cupy built for torch's CUDA {torch.version.cuda}, but the installed cupy uses CUDA "
            f"{cupy_major}.{runtime % 1000 // 10}; {cupy_install_hint(torch_major)}"
        )
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - cupy without a usable driver
        return f"needs a working cupy, but it can't see a GPU: {exc}"
    return None
