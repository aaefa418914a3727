"""Which regions of the input space an example reached, as Hypothesis ``event()``s.

Called by the pools' ``run`` from inside the test, so every property reports
coverage without code of its own: the dtype, layout and value pattern of each
tensor spec, the allocator mode, the shape of a completion order and the
traits of a DDP config.  ``fuzzdist run`` counts them per property.
"""

from __future__ import annotations

from typing import Any


def record(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    from hypothesis import currently_in_test_context, event

    if not currently_in_test_context():
        return
    seen: set[str] = set()
    for value in (*args, *kwargs.values()):
        for label in _describe(value):
            if label not in seen:
                seen.add(label)
                event(label)


def _describe(value: Any) -> list[str]:
    from fuzzdist import strategies as fst

    if isinstance(value, fst.TensorSpec):
        return [
            f"dtype={str(value.dtype).removeprefix('torch.')}",
            f"layout={value.layout}",
            f"pattern={value.pattern}",
            f"ndim={len(value.shape)}",
        ]
    if isinstance(value, fst.SharingStrategyMode):
        return [f"sharing={value.strategy}"]
    if isinstance(value, fst.CudaAllocatorMode):
        settings = value.settings_string()
        return [f"allocator={settings or 'unchanged'}"]
    if isinstance(value, fst.CompletionOrder):
        labels = ["completion=in-order" if value.is_in_order else "completion=reordered"]
        actions = {action for action, _ in value.steps}
        labels += [f"completion-has={a}" for a in sorted(actions - {"complete"})]
        return labels
    if isinstance(value, fst.DDPConfig):
        labels = [f"ddp-depth={value.depth}", "ddp-batches=uneven" if value.is_uneven else "ddp-batches=even"]
        labels += [f"ddp-{k}={v}" for k, v in sorted(value.ddp_kwargs().items()) if isinstance(v, bool)]
        return labels
    return []
