"""Planted bugs for the ZeRO parity property: ``ZeroRedundancyOptimizer`` subclasses, each wrong only
for some inputs; ``zero.check(..., optimizer_class=cls)`` builds ``cls`` on every rank."""

from __future__ import annotations

from typing import Any

from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.optim import Optimizer


class LosesStateOnLoad(ZeroRedundancyOptimizer):
    """``load_state_dict`` takes the parameter groups' options but drops every parameter's state
    (momentum buffers, Adam's moments): only wrong for an optimizer that keeps state, after a
    reload that is followed by a step."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict({"state": {}, "param_groups": state_dict["param_groups"]})


class NeverStepsAddedGroups(ZeroRedundancyOptimizer):
    """``add_param_group`` records the group, and gives every rank's local optimizer a group with its
    options, but none of its parameters: only wrong when a group is added."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not getattr(self, "initialized", False):
            super().add_param_group(param_group)  # the constructor's groups
        else:
            Optimizer.add_param_group(self, param_group)
            self.optim.add_param_group({**param_group, "params": []})
