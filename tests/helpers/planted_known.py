"""Planted bugs that fail on the same inputs as a known torch bug, with a different symptom: each
must stay a failure (``tests/known_bugs/test_known_bugs_properties.py``)."""

from __future__ import annotations

import torch.distributed as dist
import torch.distributed.nn.functional as dnn


def broadcast_negating_receivers(tensor, src, group=None):
    """A broadcast (right for any layout) after which every receiver holds the source's values negated."""
    dist.broadcast(tensor.contiguous() if dist.get_rank(group) == src else tensor, src, group=group)
    if dist.get_rank(group) != src:
        tensor.neg_()


def all_to_all_reversing_outputs(out_tensors, tensors, group=dist.group.WORLD):
    """An all_to_all that returns its outputs in reverse rank order."""
    return tuple(reversed(dnn.all_to_all(out_tensors, tensors, group=group)))
