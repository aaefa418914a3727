"""Planted bugs for the compile family: ``torch.compile`` backends that compile like ``aot_eager`` but run one
wrong graph pass over the forward graph first, each a compile-only deviation (eager never sees it).
``functional.check(pool, case)`` with ``case.backend`` one of these runs the property over it; they are
top-level functions so the case pickles to the ranks by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

ALL_REDUCE = torch.ops._c10d_functional.all_reduce.default
ALL_REDUCE_IN_PLACE = torch.ops._c10d_functional.all_reduce_.default
WAIT = torch.ops._c10d_functional.wait_tensor.default


def _move_wait_after_use(graph: torch.fx.Graph) -> None:
    """Move each all_reduce's ``wait_tensor`` after the first compute op that uses its result, which then
    reads the result's buffer before the collective has finished writing it.  On gloo how far the collective
    got by then is a matter of timing; to be caught every time, the use reads what the buffer holds when
    the all_reduce is issued: a copy of the all_reduce's input (how ``_c10d_functional.all_reduce`` starts)."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    for collective in [n for n in graph.nodes if n.target is ALL_REDUCE]:
        # Dynamo may wait twice (the program's wait, then the result's own): the chain of waits
        chain = [next(iter(collective.users))]
        while chain[-1].target is WAIT and any(u.target is WAIT for u in chain[-1].users):
            chain.append(next(u for u in chain[-1].users if u.target is WAIT))
        uses = sorted(
            (u for w in chain for u in w.users if u.op == "call_function" and u.target is not WAIT),
            key=order.__getitem__,
        )
        if not uses:
            continue
        use = uses[0]
        for wait in chain:
            use.replace_input_with(wait, collective.args[0])
        at = use
        for wait in chain:  # the waits now run after their result's first use
            at.append(wait)
            at = wait


def _alias_all_reduce_output(graph: torch.fx.Graph) -> None:
    """Make each out-of-place all_reduce reduce its input in place and return it: the result aliases the
    input, which the functional contract leaves unmodified."""
    for node in graph.nodes:
        if node.target is ALL_REDUCE:
            node.target = ALL_REDUCE_IN_PLACE


def _backend_running(graph_pass: Callable[[torch.fx.Graph], None]) -> Any:
    def forward_compiler(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graph_pass(gm.graph)
        gm.graph.lint()
        gm.recompile()
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=forward_compiler)


def wait_after_use(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """A backend: aot_eager with each all_reduce's ``wait_tensor`` moved after a use of its result."""
    return _backend_running(_move_wait_after_use)(gm, example_inputs)


def all_reduce_aliasing_input(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """A backend: aot_eager with each all_reduce's output aliasing its input (reduced in place)."""
    return _backend_running(_alias_all_reduce_output)(gm, example_inputs)


def _batch_size(example_inputs: Any) -> int:
    """The batch size of a compiled DDP module's graph: the first dimension of its one input that is neither a
    parameter nor a buffer (the batch, ``(batch, width)``)."""
    batches = [t for t in example_inputs if not isinstance(t, torch.nn.Parameter) and t.dim() == 2]
    return int(batches[0].shape[0]) if batches else 1


def _divide_gradients_by(graph: torch.fx.Graph, batch: int) -> None:
    """Divide every gradient the backward graph returns by ``batch``: the mean over the batch taken a second time."""
    output = next(n for n in graph.nodes if n.op == "output")
    grads = list(output.args[0])
    with graph.inserting_before(output):
        for i, grad in enumerate(grads):
            if isinstance(grad, torch.fx.Node):
                grads[i] = graph.call_function(torch.ops.aten.div.Scalar, (grad, batch))
    output.args = (tuple(grads),)


def ddp_gradients_averaged_twice(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
    """A backend for ``torch.compile(ddp_model)``: aot_eager whose backward divides each parameter's gradient by
    the batch size once more (the compiled path alone averages over the batch twice)."""
    batch = _batch_size(example_inputs)

    def backward_compiler(bw: torch.fx.GraphModule, bw_inputs: Any) -> Any:
        _divide_gradients_by(bw.graph, batch)
        bw.graph.lint()
        bw.recompile()
        return make_boxed_func(bw.forward)

    return aot_autograd(fw_compiler=lambda fw, _: make_boxed_func(fw.forward), bw_compiler=backward_compiler)(
        gm, example_inputs
    )
