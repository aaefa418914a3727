"""Whether the installed torch has the features some property families need (older releases lack them).

Each probe answers None when the feature is there, else a sentence naming it and the torch version.
"""

from __future__ import annotations

import importlib.util

import torch


def missing_block_current_stream() -> str | None:
    """Why ``Work.block_current_stream()`` can't be used with the installed torch, or None."""
    import torch.distributed as dist

    work = getattr(dist.distributed_c10d, "Work", None) or getattr(dist, "_Work", None)
    if work is None or not hasattr(work, "block_current_stream"):
        return f"needs Work.block_current_stream, which torch {torch.__version__} does not have"
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
        return (
            f"needs fully_shard on CPU ranks, which torch {torch.__version__} can't run: its all-gather "
            "calls the CPU stream's record_event, which this torch does not have"
        )
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
