"""The gloo probe: what the installed torch's gloo takes, asked in a fresh interpreter.

Run as ``python -m fuzzdist.pool.capabilities.gloo_probe DTYPES REDUCE_OPS FUNCTIONAL_OPS`` (each a
comma-separated list of names) by :mod:`fuzzdist.pool.capabilities.gloo`, never imported by it.  A
world-size-1 gloo group (a HashStore, nothing on disk or network) tries

* each dtype through each API of ``GLOO_APIS`` (c10d's broadcast, the functional all_reduce, DTensor's
  distribute_tensor and redistribute),
* each ReduceOp over each dtype through each API of ``GLOO_REDUCE_APIS``,
* each memory layout through each functional collective the installed torch has,

and prints what each took as its answer: ``{"dtypes": {api: [dtype]}, "reduce_ops": {api: {dtype: [op]}},
"functional_layouts": {op: [layout]}}``.  An API the installed torch lacks has no entry.  Gloo and the
functional collectives check the element type, the op and the layout at any world size: at world size 1
they refuse what they refuse at 2 (compared on torch 2.6.0 and 2.13.0; ``tests/pool/test_capabilities.py``
checks it against a world of 2).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from fuzzdist.fresh_interpreter import print_answer

Call = Callable[..., Any]


def took(call: Call, *args: Any) -> bool:
    """Whether ``call(*args)`` went through: torch refuses an element type, op or layout with one of these."""
    try:
        call(*args)
        return True
    except (RuntimeError, ValueError, TypeError):
        return False


def took_or_asserted(call: Call, *args: Any) -> bool:
    """:func:`took`, an AssertionError also a refusal: torch 2.6.0's all_gather_tensor asserts a contiguous
    input."""
    try:
        return took(call, *args)
    except AssertionError:
        return False


def dtype_calls(group: Any) -> Iterator[tuple[str, Call]]:
    """Each API of ``GLOO_APIS`` as a call on one tensor, imported as it comes (ImportError: the rest
    is missing from the installed torch)."""
    yield "broadcast", lambda t: dist.broadcast(t, 0)
    import torch.distributed._functional_collectives as fc

    yield "functional", lambda t: fc.wait_tensor(fc.all_reduce(t, "sum", group))
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    except ImportError:  # torch before DTensor went public
        from torch.distributed._tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (1,))
    yield "dtensor", lambda t: distribute_tensor(t, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).full_tensor()


def reduce_calls(group: Any) -> Iterator[tuple[str, Call]]:
    """Each API of ``GLOO_REDUCE_APIS`` as a call on a tensor and a ReduceOp name."""
    yield "all_reduce", lambda t, op: dist.all_reduce(t, getattr(dist.ReduceOp, op))
    yield "reduce", lambda t, op: dist.reduce(t, 0, getattr(dist.ReduceOp, op))
    import torch.distributed._functional_collectives as fc

    yield "functional", lambda t, op: fc.wait_tensor(fc.all_reduce(t, op.lower(), group))


def layouts() -> Iterator[tuple[str, torch.Tensor]]:
    """A float tensor in each layout of ``FUNCTIONAL_LAYOUTS`` ("sliced": contiguous at a storage offset)."""
    yield "contiguous", torch.zeros(2, 2, 2, 2)
    yield "sliced", torch.zeros(17)[1:].view(2, 2, 2, 2)
    yield "transposed", torch.zeros(2, 2, 2, 2).transpose(0, 1)
    yield "channels_last", torch.zeros(2, 2, 2, 2).to(memory_format=torch.channels_last)


def functional_calls(group: Any, ops: list[str]) -> Iterator[tuple[str, Call]]:
    """Each functional collective of ``ops`` the installed torch has, as a call on one tensor."""
    import torch.distributed._functional_collectives as fc

    for op in ops:
        fn = getattr(fc, op, None)
        if fn is None:
            continue  # an op this torch lacks: no answer for it
        if op == "all_reduce":
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, "sum", group))
        elif op.startswith("all_gather"):
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, 0, group))
        elif op.startswith("reduce_scatter"):
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, "sum", 0, group))
        elif op == "broadcast":
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, 0, group))
        else:
            yield op, lambda t, fn=fn: fc.wait_tensor(fn(t, None, None, group))


def probe(names: list[str], ops: list[str], functional_ops: list[str]) -> dict[str, Any]:
    """What a world-size-1 gloo group takes: the answer this module prints (see its docstring)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    group = dist.group.WORLD
    out: dict[str, Any] = {"dtypes": {}, "reduce_ops": {}}
    try:
        for api, call in dtype_calls(group):
            out["dtypes"][api] = [n for n in names if took(call, torch.zeros(4, dtype=getattr(torch, n)))]
    except ImportError:
        pass  # an API this torch lacks: no answer for it
    try:
        for api, reduce in reduce_calls(group):
            out["reduce_ops"][api] = {
                n: [op for op in ops if took(reduce, torch.zeros(4, dtype=getattr(torch, n)), op)] for n in names
            }
    except ImportError:
        pass
    out["functional_layouts"] = {}
    try:
        for op, call in functional_calls(group, functional_ops):
            out["functional_layouts"][op] = [name for name, t in layouts() if took_or_asserted(call, t)]
    except ImportError:
        pass
    return out


def main(argv: list[str]) -> None:
    """``argv``: the dtype names, the ReduceOp names and the functional collectives, each comma-separated."""
    warnings.simplefilter("ignore")  # torch's warnings about the calls it refuses are the answer, not news
    names, ops, functional_ops = (arg.split(",") for arg in argv[:3])
    print_answer(probe(names, ops, functional_ops))


if __name__ == "__main__":
    main(sys.argv[1:])
