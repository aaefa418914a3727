"""fuzzdist's property suite as library code, one module per property family.

Each module holds a property's rank function(s) (what ``pool.run`` runs on every rank), the
strategies and constants that draw its inputs, and a driver-side checker, ``check(pool, ...)``,
that runs the rank function on a pool and raises :class:`PropertyFailure` (an ``AssertionError``)
saying what each rank saw wrong.  The implementation under test is a keyword argument of the
checker (``broadcast=dist.broadcast``, ``wrap=None`` for DDP's process group, ...), so the same
check runs over torch's own code, your own group or implementation, or a planted bug.

``properties/test_*.py`` in the repository are thin ``@given`` tests over these modules; your
own tests can reuse them on your own pool, model or group::

    from fuzzdist.properties import ddp

    ddp.check(rank_pool, config, dtype, seed, wrap=MyProcessGroup)

Modules (import the one you need; each imports only its own dependencies):

* ``broadcast``: ``dist.broadcast`` reaches every rank.
* ``ddp``: DistributedDataParallel's gradients and parameters equal a local model's.
* ``shared_tensors``: a CPU tensor shared across processes is one piece of memory.
* ``zero_copy``: tensors taken over memory through numpy/DLPack interfaces stay zero-copy.
* ``collectives``: ``torch.distributed.nn`` autograd collectives' values and gradients.
* ``dtensor``: DTensor distribute/redistribute round trips keep values.
* ``dtensor_ops``: operators on DTensors compute what the local operators compute.
* ``cuda_ipc``: a CUDA tensor shared with ``reduce_tensor`` sees every rank's writes.
* ``cuda_zero_copy``: ``__cuda_array_interface__``/DLPack/cupy views of shared CUDA memory.
* ``block_stream``: ``Work.block_current_stream()`` holds a stream until every Work resolves.
* ``functional``: functional collectives equal a reference and the c10d collective.
* ``fsdp``: FSDP2's gradients and parameters equal a local model's.
* ``subgroups``: collectives on ``new_group`` and ``DeviceMesh`` subgroups.
* ``p2p``: send/recv, isend/irecv and ``batch_isend_irecv`` deliver the sender's tensor.
* ``object_collectives``: the object collectives hand over objects equal to the source's.
* ``zero``: ``ZeroRedundancyOptimizer`` trains as a local optimizer.
* ``join``: uneven inputs under ``Join`` train as documented.
* ``comm_hooks``: DDP communication hooks and ``no_sync`` keep their documented results.
* ``checkpoint``: DCP saves what it loads, across shardings.
* ``tensor_parallel``: ``parallelize_module`` computes what the local model computes.
* ``pipelining``: a pipelined model gives the unsplit model's output, losses and gradients.
* ``sharded_tensor``: ``ChunkShardingSpec`` sharding and gathering keep values.
* ``compile``: compiled distributed programs compute what they compute eagerly on the same ranks.
* ``fsdp1``: FSDP1's gradients and parameters equal a local model's; its state dicts round-trip.
* ``reshard``: a DCP checkpoint saved from W ranks loads into W' ranks, every value bitwise.
* ``local_map``: ``local_map`` and ``register_sharding`` equal their global semantics, or refuse as documented.
* ``faults``: a rank that dies at a drawn point leaves its survivors an error within the timeout, a working
  fresh group, and no half-written checkpoint loaded (each example in a short-lived world of its own).
* ``elastic``: ``torchrun --max-restarts`` restarts the worker group as documented and a checkpointing job
  finishes as without failures; a ``--nnodes MIN:MAX`` rendezvous admits exactly the agents that joined.

Shared by the training families: ``_arguments.py`` (their argument checks) and ``_results.py`` (the driver's
check that no rank reported a problem).
"""

from __future__ import annotations

from fuzzdist.errors import PropertyFailure

__all__ = ["PropertyFailure"]
