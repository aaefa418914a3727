"""ProcessGroups for the conformance tests: one that conforms, the seed's single-rank group,
and planted faulty ones, each wrong only for some inputs.

Every factory has the signature fuzzdist's conformance check calls on each rank:
``factory(rank, world_size, store, device) -> ProcessGroup``.  The faulty
groups are Python ``dist.ProcessGroup`` subclasses that forward every
operation to a real gloo group (``GlooForwardingGroup``) and break one.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import BroadcastOptions, _create_work_from_future

from fuzzdist.conformance import gloo


def completed_work(result: Any) -> Any:
    """A Work whose future is already resolved (the seed's ``create_work``)."""
    future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


class GlooForwardingGroup(dist.ProcessGroup):
    """A Python ProcessGroup that forwards every operation to a real gloo group: it conforms."""

    def __init__(self, rank: int, world_size: int, store: Any) -> None:
        super().__init__(rank, world_size)
        self.inner = gloo(rank, world_size, store, torch.device("cpu"))
        self.world = world_size

    def getBackendName(self) -> str:
        return f"planted:{type(self).__name__}"

    def allreduce(self, tensors, opts):
        return self.inner.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        return self.inner.broadcast(tensors, opts)

    def allgather(self, output_tensors, input_tensors, opts):
        return self.inner.allgather(output_tensors, input_tensors, opts)

    def all_gather_single(self, output, input, opts):  # noqa: A002 - torch's parameter names
        return self.inner.all_gather_single(output, input, opts)

    def _allgather_base(self, output, input, opts):  # noqa: A002
        return self.inner._allgather_base(output, input, opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        return self.inner.reduce_scatter(output_tensors, input_tensors, opts)

    def reduce_scatter_single(self, output, input, opts):  # noqa: A002
        return self.inner.reduce_scatter_single(output, input, opts)

    def _reduce_scatter_base(self, output, input, opts):  # noqa: A002
        return self.inner._reduce_scatter_base(output, input, opts)

    def alltoall(self, output_tensors, input_tensors, opts):
        return self.inner.alltoall(output_tensors, input_tensors, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):  # noqa: A002
        return self.inner.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):  # noqa: A002
        return self.inner.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def gather(self, output_tensors, input_tensors, opts):
        return self.inner.gather(output_tensors, input_tensors, opts)

    def scatter(self, output_tensors, input_tensors, opts):
        return self.inner.scatter(output_tensors, input_tensors, opts)

    def reduce(self, tensors, opts):
        return self.inner.reduce(tensors, opts)

    def send(self, tensors, dst, tag):
        return self.inner.send(tensors, dst, tag)

    def recv(self, tensors, src, tag):
        return self.inner.recv(tensors, src, tag)

    def barrier(self, opts):
        return self.inner.barrier(opts)


class DroppingContributionGroup(GlooForwardingGroup):
    """allreduce(SUM) leaves out the last rank's contribution for tensors of 4 or more elements."""

    def allreduce(self, tensors, opts):
        t = tensors[0]
        if opts.reduceOp == dist.ReduceOp.SUM and self.world > 1 and self.rank() == self.world - 1 and t.numel() >= 4:
            t.zero_()  # this rank takes part with zeros: the sum misses its values
        return self.inner.allreduce(tensors, opts)


class EarlyCompletionGroup(GlooForwardingGroup):
    """allreduce returns a Work that is already complete; the result is written into the
    caller's tensor later, when the next operation is issued on the group."""

    def __init__(self, rank: int, world_size: int, store: Any) -> None:
        super().__init__(rank, world_size, store)
        self._pending: list[tuple[Any, torch.Tensor, torch.Tensor]] = []

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for work, staging, target in pending:
            work.wait()
            target.copy_(staging)

    def allreduce(self, tensors, opts):
        self._flush()
        staging = tensors[0].clone()
        work = self.inner.allreduce([staging], opts)
        self._pending.append((work, staging, tensors[0]))
        return completed_work(tensors)  # "done", but the data has not arrived yet

    def broadcast(self, tensors, opts):
        self._flush()
        return super().broadcast(tensors, opts)

    def barrier(self, opts):
        self._flush()
        return super().barrier(opts)


class WrongSourceBroadcastGroup(GlooForwardingGroup):
    """broadcast ignores its root and always sends rank 0's tensor."""

    def broadcast(self, tensors, opts):
        from_zero = BroadcastOptions()
        from_zero.rootRank = 0
        from_zero.rootTensor = opts.rootTensor
        return self.inner.broadcast(tensors, from_zero)


class RotatedAllgatherGroup(GlooForwardingGroup):
    """allgather (the list form) returns the gathered tensors rotated by one: slot i holds
    rank i+1's tensor."""

    def allgather(self, output_tensors, input_tensors, opts):
        outputs = output_tensors[0]
        staging = [o.clone() for o in outputs]
        self.inner.allgather([staging], input_tensors, opts).wait()
        for i, out in enumerate(outputs):
            out.copy_(staging[(i + 1) % len(outputs)])
        return completed_work(output_tensors)


class ForgetsRankGroup(WrongSourceBroadcastGroup):
    """Two defects in one wrapper.  Its base is built before it knows its place (rank 0 of 1, as
    torchft's wrappers build theirs); it forwards size() to the real group but forgets rank(), so
    every rank says it is rank 0.  And its broadcast ignores the root (``WrongSourceBroadcastGroup``)."""

    def __init__(self, rank: int, world_size: int, store: Any) -> None:
        dist.ProcessGroup.__init__(self, 0, 1)
        self.inner = gloo(rank, world_size, store, torch.device("cpu"))
        self.world = world_size

    def getSize(self) -> int:
        return self.inner.size()


# -- the seed's single-rank group (torch's test_c10d_pypg.py) -------------------------------


class MyWork(dist._Work):
    """A Work subclass with wait() and get_future() overridden, as in the seed."""

    def __init__(self, result: Any, pg: Any) -> None:
        super().__init__()
        self.result_ = result
        self.future_ = torch.futures.Future()
        self.future_.set_result(result)
        self.pg_ = weakref.ref(pg)

    def wait(self, timeout=None):
        self.pg_().wait_count += 1
        return True

    def get_future(self):
        self.pg_().get_future_count += 1
        return self.future_


class LonelyRankProcessGroup(dist.ProcessGroup):
    """The seed's ProcessGroup: world size 1 only; implements broadcast, allgather and
    allreduce (as no-ops and a copy: right for one rank), nothing else."""

    def __init__(self, rank: int, world: int, use_wrapper: bool) -> None:
        super().__init__(rank, world)
        assert rank == 0
        assert world == 1
        self._rank = rank
        self._world = world
        self.wait_count = 0
        self.get_future_count = 0
        self.use_wrapper = use_wrapper
        self._work: list[Any] = []

    def _done(self, result: Any) -> Any:
        if self.use_wrapper:
            return completed_work(result)
        work = MyWork(result, self)
        self._work.append(work)
        return work

    def broadcast(self, tensor_list, opts):
        return self._done(tensor_list)

    def allgather(self, output_tensors, input_tensor, opts):
        for o, i in zip(output_tensors[0], input_tensor, strict=False):
            o.copy_(i)
        return self._done(output_tensors)

    def allreduce(self, tensors, opts):
        return self._done(tensors)

    def getSize(self) -> int:
        return self._world

    def getBackendName(self) -> str:
        return "lonely-pg"

    def __repr__(self) -> str:
        return f"PLG w:{self._world} r:{self._rank}"


class StackFormCrashGroup(GlooForwardingGroup):
    """reduce_scatter_tensor's "stack" input form kills the rank (for no reason the known-bug registry
    knows); its plain, concatenated form conforms."""

    def reduce_scatter_single(self, output, input, opts):  # noqa: A002
        if input.dim() == output.dim() + 1:
            os._exit(7)
        return self.inner.reduce_scatter_single(output, input, opts)

    def _reduce_scatter_base(self, output, input, opts):  # noqa: A002
        if input.dim() == output.dim() + 1:
            os._exit(7)
        return self.inner._reduce_scatter_base(output, input, opts)


# -- factories: factory(rank, world_size, store, device) -------------------------------------


def forwarding(rank, world_size, store, device):
    return GlooForwardingGroup(rank, world_size, store)


def dropping_contribution(rank, world_size, store, device):
    return DroppingContributionGroup(rank, world_size, store)


def early_completion(rank, world_size, store, device):
    return EarlyCompletionGroup(rank, world_size, store)


def wrong_source_broadcast(rank, world_size, store, device):
    return WrongSourceBroadcastGroup(rank, world_size, store)


def rotated_allgather(rank, world_size, store, device):
    return RotatedAllgatherGroup(rank, world_size, store)


def forgets_rank(rank, world_size, store, device):
    return ForgetsRankGroup(rank, world_size, store)


def stack_form_crash(rank, world_size, store, device):
    return StackFormCrashGroup(rank, world_size, store)


def lonely_rank(rank, world_size, store, device):
    """The seed's group with its Work subclass (MyWork)."""
    return LonelyRankProcessGroup(rank, world_size, use_wrapper=False)


def lonely_rank_wrapper(rank, world_size, store, device):
    """The seed's group with Works made by ``_create_work_from_future``."""
    return LonelyRankProcessGroup(rank, world_size, use_wrapper=True)


def not_a_group(rank, world_size, store, device):
    return object()
