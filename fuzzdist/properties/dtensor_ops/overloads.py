"""The registered-overload report: every aten overload DTensor registers a sharding rule or strategy for
(the sharding propagator's ``op_to_rules``, ``op_strategy_funcs`` and ``op_single_dim_strategy_funcs``),
each either drawn by the family or listed with the reason it is not.

An overload is drawn when ``schema_ops`` calls it through its schema, or when one of the hand-written
operators reaches it: each is run on a few drawn examples' full tensors under a dispatch mode that records
the aten overloads they dispatch to (forward and, where checked, backward).  ``python -m
fuzzdist.properties.dtensor_ops.overloads`` prints the counts.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuzzdist.properties.dtensor_ops.cases import flat_operands, substitute
from fuzzdist.properties.dtensor_ops.catalogue import OpDef, all_ops
from fuzzdist.properties.dtensor_ops.operands import Operand
from fuzzdist.properties.dtensor_ops.schema_ops import Plan, plans

_REASONS = (
    (
        r"rand|dropout|bernoulli|normal|uniform|exponential|multinomial|poisson|geometric|cauchy|log_normal",
        "random values: drawn only at parameters that fix the values (random_values), this one has none",
    ),
    (r"_foreach_|_fused_|_amp_", "a multi-tensor (list) kernel the foreach group does not call"),
    (r"backward", "a backward kernel not reached by the drawn operators' autograd"),
    (
        r"conv|pool|batch_norm|upsample|_fft|grid_sampler|im2col|col2im",
        "a convolution, pooling, FFT, batch norm or resampling kernel the conv group does not reach",
    ),
    (r"_\.|\.out$|_out$|\.\w*out\b", "an in-place or out= variant without a generator yet"),
)


@dataclass
class Report:
    """``registered`` overload names; ``drawn`` the drawn ones; ``excluded`` the others, each with its reason."""

    registered: set[str] = field(default_factory=set)
    drawn: set[str] = field(default_factory=set)
    excluded: dict[str, str] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Registered, drawn, and excluded by reason."""
        out = {"registered": len(self.registered), "drawn": len(self.drawn)}
        out.update((f"excluded: {reason}", n) for reason, n in sorted(Counter(self.excluded.values()).items()))
        return out

    def __str__(self) -> str:
        return "\n".join(f"{n:6d}  {what}" for what, n in self.counts().items())


def registered() -> set[str]:
    """The names of the overloads DTensor registers a rule or strategy for."""
    from torch.distributed.tensor import DTensor

    prop = DTensor._op_dispatcher.sharding_propagator
    return {
        str(op)
        for table in (prop.op_to_rules, prop.op_strategy_funcs, prop.op_single_dim_strategy_funcs)
        for op in table
    }


class _Recorder(TorchDispatchMode):
    """Records the name of every aten overload dispatched under it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen.add(str(func))
        return func(*args, **(kwargs or {}))


def reached(op_def: OpDef, examples: int = 5) -> set[str]:
    """The aten overloads ``op_def`` dispatches to on ``examples`` drawn examples (forward and backward)."""
    recorder = _Recorder()
    for _ in range(examples):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            args, kwargs = op_def.arguments().example()
        fulls = []
        for operand in flat_operands(args):
            assert isinstance(operand, Operand), "a drawn operator's arguments hold no aliases"
            full = operand.full()
            fulls.append(full.requires_grad_(op_def.grad and full.dtype.is_floating_point))
        call_args, _ = substitute(args, fulls)
        try:
            with recorder:
                out = op_def.call(*call_args, **kwargs)
                outs = [
                    o
                    for o in (out if isinstance(out, (tuple, list)) else [out])
                    if isinstance(o, torch.Tensor) and o.requires_grad
                ]
                if outs and op_def.mutates is None:
                    torch.autograd.grad(
                        outs,
                        [f for f in fulls if f.requires_grad],
                        [torch.ones_like(o) for o in outs],
                        allow_unused=True,
                    )
        except Exception:  # noqa: BLE001 - an example outside the operator's domain reaches nothing
            continue
    return recorder.seen


def report(examples: int = 5) -> Report:
    """The registered-overload report of the installed torch."""
    result = Report(registered=registered())
    drawn = {name for name, plan in plans().items() if isinstance(plan, Plan)}
    for op_def in all_ops().values():
        if op_def.group != "schema_ops":
            drawn |= reached(op_def, examples)
    result.drawn = drawn & result.registered
    schema_reasons = {name: reason for name, reason in plans().items() if isinstance(reason, str)}
    for name in sorted(result.registered - result.drawn):
        reason = schema_reasons.get(name)
        if reason is not None:
            reason = f"pointwise, not callable through its schema here ({reason})"
        else:
            reason = next((why for pattern, why in _REASONS if re.search(pattern, name)), "no generator yet")
        result.excluded[name] = reason
    return result


if __name__ == "__main__":
    print(report())
