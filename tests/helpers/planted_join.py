"""Planted bugs for the uneven-inputs property (``fuzzdist.properties.join``): ``DistributedDataParallel``
subclasses whose join hook is wrong only for some inputs; ``join.check(..., ddp_class=cls)`` builds
``cls`` on every rank.  Each delegates everything else to torch."""

from __future__ import annotations

from typing import Any

from torch.distributed.algorithms.join import JoinHook
from torch.nn.parallel import DistributedDataParallel


class IgnoresDivideSetting(DistributedDataParallel):
    """``join_hook`` always divides by the initial world size: ``divide_by_initial_world_size=False``
    (divide by the ranks still training) is ignored.  Wrong only at a step where some rank has joined
    and the setting is False."""

    def join_hook(self, **kwargs: Any) -> JoinHook:
        return super().join_hook(**{**kwargs, "divide_by_initial_world_size": True})


class _NoFinalSync(JoinHook):
    """DDP's join hook without its post-hook: the last joiner's model is never broadcast."""

    def __init__(self, inner: JoinHook) -> None:
        self.inner = inner

    def main_hook(self) -> None:
        self.inner.main_hook()

    def post_hook(self, is_last_joiner: bool) -> None:
        pass


class SkipsFinalSync(DistributedDataParallel):
    """``join_hook``'s post-hook does nothing, so leaving the join context does not hand the ranks with
    fewer batches the model of the last joiner.  Wrong only with uneven inputs."""

    def join_hook(self, **kwargs: Any) -> JoinHook:
        return _NoFinalSync(super().join_hook(**kwargs))
