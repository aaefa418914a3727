"""Planted bugs for the pipelining property (``fuzzdist.properties.pipelining``): ``ScheduleGPipe``
subclasses, each wrong only for some inputs; ``pipelining.check(..., schedule_class=cls)`` builds ``cls``
on every rank.  Each delegates the pipelining itself to torch."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.pipelining import ScheduleGPipe


class IgnoresScaleGrads(ScheduleGPipe):
    """Never divides the accumulated gradients by the number of micro-batches, whatever ``scale_grads``
    says: wrong only with ``scale_grads=True`` and more than one micro-batch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "scale_grads": False})


class MisalignsTargets(ScheduleGPipe):
    """Pairs each micro-batch's output with the next micro-batch's target (the target rolled by one
    micro-batch): wrong only with more than one micro-batch whose targets differ."""

    def step(self, *args: Any, target: torch.Tensor | None = None, **kwargs: Any) -> Any:
        if target is not None:
            target = torch.roll(target, shifts=target.shape[0] // self._n_microbatches, dims=0)
        return super().step(*args, target=target, **kwargs)
