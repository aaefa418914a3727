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
"""

from __future__ import annotations

from fuzzdist.errors import PropertyFailure

__all__ = ["PropertyFailure"]
