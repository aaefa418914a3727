"""What this machine can run, asked before any rank process is spawned.

Each probe answers ``None`` when the capability is there and otherwise a
sentence that says what is missing and what to do; the pool raises it as an
error and the pytest plugin turns it into a skip reason.
"""

from __future__ import annotations

import torch

DEVICES = ("cpu", "cuda")

# Element types gloo's collectives accept (ProcessGroupGloo's type dispatch;
# complex travels as real pairs).  Not int16, not uint16/32/64, not float8:
# gloo raises "Invalid scalar type" for those.  tests/test_capabilities.py
# checks this list against the installed gloo.
GLOO_DTYPES = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
    torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool,
)


def validate_pool_args(world_size: object, backend: object, device: object, timeout: object) -> None:
    """Raise ValueError/CapabilityError for arguments no pool could run with."""
    from fuzzdist.errors import CapabilityError

    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int (the number of ranks), got {world_size!r}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}: use one of {', '.join(map(repr, DEVICES))}")
    if not isinstance(backend, str):
        raise ValueError(f"backend must be a string such as 'gloo' or 'nccl', got {backend!r}")
    reason = missing_distributed()
    if reason:
        raise CapabilityError(reason)
    reason = missing_backend(backend)
    if reason:
        raise ValueError(reason)
    if backend == "nccl" and device != "cuda":
        raise ValueError("backend 'nccl' runs collectives on CUDA tensors only: pass device='cuda', "
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


def missing_distributed() -> str | None:
    import torch.distributed as dist

    if not dist.is_available():
        return f"torch {torch.__version__} was built without torch.distributed"
    return None


def available_backends() -> list[str]:
    import torch.distributed as dist

    names = [b for b in ("gloo", "nccl", "mpi", "ucc", "xccl") if _backend_available(dist, b)]
    extra = [b for b in getattr(dist.Backend, "backend_list", []) if b not in names and b != "undefined"]
    return names + [b for b in extra if _backend_available(dist, b)]


def missing_backend(backend: str) -> str | None:
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


def _backend_available(dist, name: str) -> bool:
    probe = getattr(dist, "is_backend_available", None)
    if probe is not None:
        try:
            return bool(probe(name))
        except Exception:
            return False
    return bool(getattr(dist, f"is_{name}_available", lambda: False)())
