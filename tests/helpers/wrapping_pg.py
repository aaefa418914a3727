"""Subjects for check-pg's ``--wraps``: Python ProcessGroups that delegate every call to gloo under a
name of their own (so the known-bug registry can't tell they are gloo), one faithful, one with a
planted deviation in a call where gloo has a known bug of its own.

Factories: ``factory(rank, world_size, store, device)``.
"""

from __future__ import annotations

from typing import Any

import torch

from helpers.planted_backends import GlooForwardingGroup, completed_work


class Wrapper(GlooForwardingGroup):
    """Every call goes to gloo, unchanged; the group calls itself "acme"."""

    def getBackendName(self) -> str:
        return "acme"


class BoolSumThreeWrapper(Wrapper):
    """Planted deviation: a bool SUM allreduce leaves the byte 3 where gloo leaves 2 (the symptom
    looks like gloo's known bug, but gloo itself gives something else)."""

    def allreduce(self, tensors, opts):
        work = self.inner.allreduce(tensors, opts)
        if tensors[0].dtype != torch.bool or opts.reduceOp != torch.distributed.ReduceOp.SUM:
            return work
        work.wait()
        raw = tensors[0].view(torch.uint8)
        raw[raw == 2] = 3
        return completed_work(tensors)


def wrapper(rank: int, world_size: int, store: Any, device: torch.device) -> Wrapper:
    return Wrapper(rank, world_size, store)


def bool_sum_three(rank: int, world_size: int, store: Any, device: torch.device) -> BoolSumThreeWrapper:
    return BoolSumThreeWrapper(rank, world_size, store)
