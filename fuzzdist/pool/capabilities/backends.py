"""Which process group backends the installed torch has: asked before a pool is made with one."""

from __future__ import annotations

from typing import Any

import torch

# The backends torch names, in the order fuzzdist lists them; any other the build registers comes after.
KNOWN_BACKENDS = ("gloo", "nccl", "mpi", "ucc", "xccl")


def missing_distributed() -> str | None:
    """Why torch.distributed can't be used in this torch build, or None."""
    import torch.distributed as dist

    if not dist.is_available():
        return f"torch {torch.__version__} was built without torch.distributed"
    return None


def available_backends() -> list[str]:
    """The process group backends this torch build has (gloo, nccl, mpi, ucc, xccl)."""
    import torch.distributed as dist

    names = [b for b in KNOWN_BACKENDS if _backend_available(dist, b)]
    extra = [b for b in getattr(dist.Backend, "backend_list", []) if b not in names and b != "undefined"]
    return names + [b for b in extra if _backend_available(dist, b)]


def missing_backend(backend: str) -> str | None:
    """Why ``backend`` can't be used here (with the backends that can), or None."""
    if backend in available_backends():
        return None
    return (
        f"backend {backend!r} is not available in torch {torch.__version__}; "
        f"available: {', '.join(available_backends()) or 'none'}. "
        "Use 'gloo' for CPU ranks (and for several ranks sharing one GPU)."
    )


def _backend_available(dist: Any, name: str) -> bool:
    """Whether torch.distributed (``dist``) has the backend ``name``: asked the newer way where it can be."""
    probe = getattr(dist, "is_backend_available", None)
    if probe is not None:
        try:
            return bool(probe(name))
        except Exception:  # noqa: BLE001 - a probe that fails means the backend isn't there
            return False
    return bool(getattr(dist, f"is_{name}_available", lambda: False)())
