"""The operations ``fuzzdist check-pg`` fuzzes, one definition each, and their registry ``OPS``.

One module per family: ``allreduce.py`` (allreduce, reduce), ``allgather.py``, ``reduce_scatter.py``,
``alltoall.py``, ``broadcast.py``, ``gather_scatter.py``, ``send_recv.py``, ``barrier.py``; the base
class ``OpInfo`` and ``OpCall`` in ``_base.py``, the rank-side buffers in ``_buffers.py``.

An op's definition (an ``OpInfo`` subclass instance) holds everything about
it: how a call is drawn (``draw``) and probed (``probes``), what a rank
builds and calls (``prepare``, run in the rank processes), the reference
(``expected``) and the comparison (``compare``/``problems``).  The engine,
the drawing and the rank code iterate ``OPS`` and never switch on names.

How to add an op:

1. Subclass ``OpInfo`` (``_base.py``) in a module here, or reuse a family's class with other fields.
2. Implement ``prepare`` (build tensors with ``Prepared``, set its ``issue`` to call the PG method).
3. Implement ``expected`` (per rank, (what, tensor or ``Reduction``)) from ``input_values(call, rank)``.
4. Override ``draw``/``specs``/``draw_roots``/``probes``/``problems``/``describe_args`` only if the defaults
   (driven by ``reduces``, ``root``, ``layouts``, ``rows``, ``min_world``) don't fit the op.
5. Add the instance to ``_DEFINITIONS`` below (or ``OPS[op.name] = op`` at run time, before the check):
   probing, fuzzing, the async check and the report pick it up.
"""

from __future__ import annotations

from fuzzdist.conformance.ops._base import (
    OPS,
    REDUCE_OPS,
    REDUCE_OPS_BY_KIND,
    Capabilities,
    OpCall,
    OpInfo,
    Reduction,
    input_values,
)
from fuzzdist.conformance.ops._buffers import Prepared, main_input, options, real, reduce_op_enum
from fuzzdist.conformance.ops.allgather import ALLGATHER, ALLGATHER_BASE, ALLGATHER_INTO_TENSOR
from fuzzdist.conformance.ops.allreduce import ALLREDUCE, REDUCE
from fuzzdist.conformance.ops.alltoall import ALLTOALL, ALLTOALL_BASE
from fuzzdist.conformance.ops.barrier import BARRIER
from fuzzdist.conformance.ops.broadcast import BROADCAST
from fuzzdist.conformance.ops.gather_scatter import GATHER, SCATTER
from fuzzdist.conformance.ops.reduce_scatter import REDUCE_SCATTER, REDUCE_SCATTER_BASE, REDUCE_SCATTER_TENSOR
from fuzzdist.conformance.ops.send_recv import SEND_RECV

# In this order they are probed, fuzzed, drawn by the async check (its shrink order) and reported.
_DEFINITIONS: tuple[OpInfo, ...] = (
    ALLREDUCE,
    BROADCAST,
    ALLGATHER,
    ALLGATHER_INTO_TENSOR,
    ALLGATHER_BASE,
    REDUCE_SCATTER,
    REDUCE_SCATTER_TENSOR,
    REDUCE_SCATTER_BASE,
    ALLTOALL,
    ALLTOALL_BASE,
    GATHER,
    SCATTER,
    REDUCE,
    SEND_RECV,
    BARRIER,
)
OPS.update((op.name, op) for op in _DEFINITIONS)

__all__ = [
    "OPS",
    "REDUCE_OPS",
    "REDUCE_OPS_BY_KIND",
    "Capabilities",
    "OpCall",
    "OpInfo",
    "Prepared",
    "Reduction",
    "input_values",
    "main_input",
    "options",
    "real",
    "reduce_op_enum",
]
