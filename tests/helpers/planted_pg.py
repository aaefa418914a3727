"""Planted bugs for the DDP parity property: faulty process groups, each wrong only for some inputs.

Every class wraps a real process group (``ctx.group``) as
``cls(inner, *args)``, the way ``ddp_parity(..., wrap=cls, wrap_args=args)``
builds it on each rank.  Ops other than the faulty one pass straight
through to the real group, so every rank still enters the same
collectives in the same order.  ``RecordingPG`` is a helper, not a bug.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from fuzzdist.toolkit.reorder import ReorderingProcessGroup


def _done_work(result: list[torch.Tensor]) -> dist._Work:
    """A Work that has already completed with ``result``."""
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


class _PassThroughPG(dist.ProcessGroup):
    """Forwards every op DDP uses on CPU to ``inner``; subclasses override the faulty one."""

    def __init__(self, inner: dist.ProcessGroup) -> None:
        super().__init__(inner.rank(), inner.size())
        self._inner = inner

    def getRank(self) -> int:
        return self._inner.rank()

    def getSize(self) -> int:
        return self._inner.size()

    def getBackendName(self) -> str:
        return f"planted-{type(self).__name__}"

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        return self._inner.allreduce(tensors, opts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        return self._inner.broadcast(tensors, opts)

    def allgather(
        self, output_tensors: list[list[torch.Tensor]], input_tensors: list[torch.Tensor], opts: Any
    ) -> dist._Work:
        return self._inner.allgather(output_tensors, input_tensors, opts)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> dist._Work:  # noqa: A002
        return self._inner._allgather_base(output, input, opts)

    def barrier(self, opts: Any) -> dist._Work:
        return self._inner.barrier(opts)


class RecordingPG(_PassThroughPG):
    """Not a bug: a pass-through group that records the size of every allreduce."""

    def __init__(self, inner: dist.ProcessGroup) -> None:
        super().__init__(inner)
        self.allreduce_numels: list[int] = []

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        self.allreduce_numels.extend(t.numel() for t in tensors)
        return super().allreduce(tensors, opts)


class CorruptingLargeAllreducePG(_PassThroughPG):
    """Adds 1 to the last element of every allreduce result of ``min_numel`` or more
    elements, on every rank: a DDP bucket that large comes back wrong, smaller ones are fine."""

    def __init__(self, inner: dist.ProcessGroup, min_numel: int = 8) -> None:
        super().__init__(inner)
        self.min_numel = min_numel

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        self._inner.allreduce(tensors, opts).wait()
        for t in tensors:
            if t.numel() >= self.min_numel and t.is_floating_point():
                with torch.no_grad():
                    t.view(-1)[-1] += 1
        return _done_work(tensors)


class EarlyCompletingPG(_PassThroughPG):
    """Hands back an allreduce Work that has completed before its data is ready.

    The real allreduce runs on a staging copy, and its result is never
    copied in, so the caller reads its own un-reduced tensor.  For DDP that
    is this rank's gradient scaled by 1/world_size, not the average.  The
    real Works are waited on at the next op, so the ranks stay in step.
    """

    def __init__(self, inner: dist.ProcessGroup) -> None:
        super().__init__(inner)
        self._in_flight: list[Any] = []

    def _settle(self) -> None:
        while self._in_flight:
            self._in_flight.pop().wait()

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        self._settle()
        self._in_flight.append(self._inner.allreduce([t.detach().clone() for t in tensors], opts))
        return _done_work(tensors)  # "done", but the result never lands

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        self._settle()
        return super().broadcast(tensors, opts)

    def allgather(self, output_tensors, input_tensors, opts):
        self._settle()
        return super().allgather(output_tensors, input_tensors, opts)

    def barrier(self, opts: Any) -> dist._Work:
        self._settle()
        return super().barrier(opts)

    def close(self) -> None:
        self._settle()


class TailDroppingAllreducePG(_PassThroughPG):
    """An allreduce that splits tensors into world_size equal chunks and forgets the
    remainder for the last rank.  Its contribution to the last ``numel % world_size``
    elements is dropped, on every rank, so the ranks still agree with one another."""

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        world = self.getSize()
        staging = [t.detach().clone() for t in tensors]
        if self.getRank() == world - 1:
            for s in staging:
                tail = s.numel() % world
                if tail:
                    s.view(-1)[-tail:] = 0
        self._inner.allreduce(staging, opts).wait()
        with torch.no_grad():
            for t, s in zip(tensors, staging, strict=False):
                t.copy_(s)
        return _done_work(tensors)


class FifoCompletionPG(ReorderingProcessGroup):
    """A ReorderingProcessGroup that assumes allreduces complete in issue order.

    Whichever allreduce completes, its result goes into the oldest allreduce still
    pending (as many elements as fit).  Right as long as completions come in issue
    order, wrong as soon as the schedule reorders two of them.
    """

    def __init__(self, inner: dist.ProcessGroup, schedule: Any, **kwargs: Any) -> None:
        super().__init__(inner, schedule, **kwargs)
        self._pending: deque[list[torch.Tensor]] = deque()

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        staging = [t.detach().clone() for t in tensors]
        real = self.inner.allreduce(staging, opts)
        self._pending.append(tensors)

        def copy_back() -> None:
            targets = self._pending.popleft()  # the bug: not necessarily this work's tensors
            with torch.no_grad():
                for target, staged in zip(targets, staging, strict=False):
                    k = min(target.numel(), staged.numel())
                    target.view(-1)[:k].copy_(staged.view(-1)[:k])

        return self._issue("allreduce", real, copy_back, tensors)
