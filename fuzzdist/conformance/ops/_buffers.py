"""Rank-side tools of the op definitions: guarded output buffers, and one call's prepared tensors.

Nothing here decides whether a result is right: a rank returns what it
observed (its outputs, and the few problems only a rank can see: bytes
written outside an output tensor, a modified input) and the driver compares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from fuzzdist.conformance.ops._base import OpCall, input_seed, input_values, pack
from fuzzdist.toolkit.checks import first_difference

SENTINEL = 0xA5  # every byte of an output buffer before the op runs
GUARD_ELEMENTS = 8  # guard elements after every output tensor


class Guarded:
    """An output tensor: a view ``offset`` elements into a buffer filled with SENTINEL bytes,
    with GUARD_ELEMENTS more after it, so writes outside the view show."""

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        offset: int,
        device: torch.device,
        values: torch.Tensor | None = None,
    ) -> None:
        numel = 1
        for s in shape:
            numel *= s
        self.itemsize = dtype.itemsize
        self.start = offset * self.itemsize
        self.end = (offset + numel) * self.itemsize
        total = offset + numel + GUARD_ELEMENTS
        self.buffer = torch.full((total * self.itemsize,), SENTINEL, dtype=torch.uint8, device=device)
        self.tensor = self.buffer.view(dtype)[offset : offset + numel].view(shape)
        if values is not None:
            self.tensor.copy_(values.to(device))

    def problems(self, what: str) -> list[str]:
        """The writes outside the view, if any."""
        out = []
        for name, region in (("before", self.buffer[: self.start]), ("after", self.buffer[self.end :])):
            changed = int((region != SENTINEL).sum())
            if changed:
                out.append(f"{what}: {changed} byte(s) written {name} the tensor, outside its bounds")
        return out


def main_input(call: OpCall, rank: int, device: torch.device) -> tuple[torch.Tensor, Guarded | None]:
    """The rank's main input, in the drawn layout; guarded when the layout is (offset-)contiguous."""
    spec = call.spec
    if spec.layout in ("contiguous", "sliced"):
        guarded = Guarded(spec.shape, spec.dtype, spec.storage_offset, device, input_values(call, rank))
        return guarded.tensor, guarded
    return spec.materialize(device, input_seed(call.seed, rank, 0)), None


def real(t: torch.Tensor) -> torch.Tensor:
    """What torch.distributed hands the backend for a complex tensor: its real view."""
    return torch.view_as_real(t) if t.is_complex() else t


def options(cls: type, async_op: bool, **fields: Any) -> Any:
    """An option struct (``AllreduceOptions``, ...) with ``fields`` set, and asyncOp where torch has it."""
    opts = cls()
    for name, value in fields.items():
        setattr(opts, name, value)
    if hasattr(opts, "asyncOp"):
        opts.asyncOp = async_op
    return opts


def reduce_op_enum(name: str | None) -> Any:
    """``dist.ReduceOp.<name>``."""
    return getattr(dist.ReduceOp, str(name))


class Prepared:
    """One call's tensors on one rank, ready to issue; what to send back after it ran.

    ``issue(async_op)`` calls the ProcessGroup method and returns its Work
    (or None: this rank takes no part).  ``after()``, run once the call was
    waited on, gives the ``value`` sent back (barrier: how many ranks had
    arrived).  Outputs are returned in the order they were registered.
    """

    def __init__(self, call: OpCall, device: torch.device) -> None:
        self.call = call
        self.device = device
        self.issue: Callable[[bool], Any] = lambda async_op: None
        self.after: Callable[[], Any] = lambda: None
        self.outputs: list[torch.Tensor] = []
        self.guards: list[tuple[str, Guarded]] = []
        self.read_only: list[tuple[str, torch.Tensor, torch.Tensor]] = []  # (what, tensor, copy before)

    def output(self, what: str, shape: tuple[int, ...], values: torch.Tensor | None = None) -> torch.Tensor:
        """A new output tensor of the call's dtype, ``out_offset`` elements into a guarded buffer
        (holding ``values`` first: an input the op overwrites)."""
        guarded = Guarded(tuple(shape), self.call.spec.dtype, self.call.out_offset, self.device, values)
        self.guards.append((what, guarded))
        self.outputs.append(guarded.tensor)
        return guarded.tensor

    def in_place(self, what: str, rank: int) -> torch.Tensor:
        """The rank's main input, which the op overwrites: it is also an output."""
        tensor, guarded = main_input(self.call, rank, self.device)
        self.outputs.append(tensor)
        if guarded is not None:
            self.guards.append((what, guarded))
        return tensor

    def keep(self, what: str, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor``, an input the op must not modify."""
        self.read_only.append((what, tensor, tensor.detach().clone()))
        return tensor

    def observe(self) -> dict[str, Any]:
        """What this rank sends back: its outputs (packed), its notes, ``after()``'s value."""
        value = self.after()
        notes = []
        for what, guarded in self.guards:
            notes.extend(guarded.problems(what))
        for what, tensor, before in self.read_only:
            diff = first_difference(tensor, before)
            if diff is not None:
                notes.append(f"{what} (an input) was modified: {diff}")
        return {"out": [pack(t) for t in self.outputs], "notes": notes, "value": value}
