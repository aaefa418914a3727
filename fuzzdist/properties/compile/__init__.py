"""Compiled distributed code: ``torch.compile`` must not change what the distributed program computes.

Every property of the family runs the same program eagerly and compiled on the same ranks and compares the two:
exact where the program is pure data movement, otherwise within the bound its module's docstring derives
from the reordering and re-rounding Inductor may do.

Modules:

* ``functional``: drawn programs of compute ops, functional collectives (waited where drawn) and the in-place
  c10d calls Dynamo rewrites into them, compiled with ``aot_eager`` and ``inductor`` and Inductor's options
  that move communication.
* ``ddp``: ``torch.compile(ddp_model)`` (DDPOptimizer's graph splitting, compiled autograd drawn) trains as eager
  DDP does, for DDP configs drawn as the DDP property draws them.
* ``dtensor``: drawn chains of DTensor operators (pointwise ops, sums leaving ``Partial`` results,
  redistributes) compiled, against the same chains run eagerly.
* ``fsdp``: a ``fully_shard`` model compiled trains as the same model eagerly, for FSDP2 configs drawn as the
  FSDP2 parity property draws them (without mixed precision).
* ``cache``: one compiled program per graph structure, kept for the rank process's life: how the family keeps
  recompilation bounded, and what it counts of Dynamo's work (graphs, graph breaks) for the events.
* ``outcomes``: the driver's reading of what the ranks return, shared by the properties: graph breaks as
  Hypothesis events, ranks' problems as a failure.
* ``known_bugs``: the torch bugs the family meets, as known-bug entries.
"""
