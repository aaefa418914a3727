"""What this machine and the installed torch can run, asked before any rank process is spawned.

Each probe answers ``None`` when the capability is there and otherwise a sentence that says what is
missing and what to do; the pool raises it as an error and the pytest plugin turns it into a skip
reason.  One module per question::

    pool_args.py       a pool's arguments, checked before it starts; how many ranks the memory holds
    backends.py        which process group backends the installed torch has
    gloo.py            which dtypes, ReduceOps and input layouts the installed torch's gloo takes
    gloo_probe.py      the program that asks it, run in a fresh interpreter (``python -m``)
    gpu.py             GPUs, peer access, pidfd_getfd (CUDA IPC), allocator settings, cupy
    torch_features.py  what older torch releases lack (fully_shard on CPU, block_current_stream, ...)
    probes.py          the named capabilities (``PROBES``, ``missing(...)``, the ``needs`` marker)
    per_pool.py        what a pool's ranks support, probed on them once per pool (``probed_once``)

Public names (the rest is each module's own):
    missing(*names), PROBES: the named capabilities; missing_gpus(n).
    probed_once(pool, key, probe): what a pool's ranks support, probed once per pool.
    gloo_dtypes(api), gloo_reduce_ops(api, dtype), functional_layouts(op): what the installed gloo takes.
"""

from fuzzdist.pool.capabilities.gloo import functional_layouts, gloo_dtypes, gloo_reduce_ops
from fuzzdist.pool.capabilities.gpu import missing_gpus
from fuzzdist.pool.capabilities.per_pool import probed_once
from fuzzdist.pool.capabilities.probes import PROBES, missing

__all__ = [
    "PROBES",
    "functional_layouts",
    "gloo_dtypes",
    "gloo_reduce_ops",
    "missing",
    "missing_gpus",
    "probed_once",
]
