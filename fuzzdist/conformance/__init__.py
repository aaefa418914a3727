"""Conformance fuzzing for any ProcessGroup backend.

Point fuzzdist at a factory that builds your ProcessGroup on every rank and
it fuzzes the c10d contract against a reference computed in the driver::

    from fuzzdist.conformance import check_process_group

    report = check_process_group("my_backend:make_group", world_sizes=(1, 2, 3))
    print(report.summary())
    assert report.conforms, report

The factory is called on each rank as ``factory(rank, world_size, store,
device)`` and returns a ``torch.distributed.ProcessGroup`` (a Python
subclass is fine) or a ``torch.distributed.Backend``.

* Every operation is first *probed* per dtype (and per ReduceOp, and per
  memory layout) with a tiny tensor.  What the backend refuses
  (``NotImplementedError``, "not supported"/"not implemented" errors, a
  Python ProcessGroup that does not override a method) is reported once as
  *unsupported*, never as a failure, and is not fuzzed.
* Then each supported operation is fuzzed with Hypothesis over drawn world
  sizes, tensor specs (dtype, shape, layout, values), roots, peers and
  uneven all-to-all splits.  A wrong result, a hang, an exception, bytes
  written outside an output tensor or a modified input is a *failure*,
  shrunk to a minimal example whose message names the operation, its
  arguments, and the expected and actual values.
* ``async``: 2 to 4 operations issued with ``async_op=True`` before any is
  waited, then waited in a drawn completion order.
* ``ddp_parity``: the property suite's DDP parity property, run over the
  group (directly, and through a ``ReorderingProcessGroup`` over it).

Also available as ``fuzzdist check-pg module:callable`` (:mod:`fuzzdist.cli.check_pg`)
and from pytest (``--fuzzdist-pg module:callable``, the ``pg_conformance``
fixture, ``properties/test_pg_conformance.py``, ``plugin.py``).  See
``docs/backend-authors.md``.

Modules: ``_engine.py`` (the session, the order of the checks), ``_options.py`` (``CheckOptions``),
``_factories.py`` (the reference factories), ``_probe.py`` (what the group implements),
``_checks.py`` (the checks a run knows), ``_op_check.py`` (one operation's check), ``_composite.py``
(``async`` and ``ddp_parity``), ``_draw.py`` (the async check's strategies), ``_fuzzing.py``
(Hypothesis within a check's share), ``_rank.py`` (the code on the ranks), ``_report.py`` (the
report), ``known_bugs.py`` (the torch bugs check-pg meets); ``ops/``, one definition per operation.
"""

from fuzzdist.conformance._checks import ALL_CHECKS, ASYNC, DDP, all_checks
from fuzzdist.conformance._engine import ConformanceSession, check_process_group
from fuzzdist.conformance._factories import gloo, gloo_backend
from fuzzdist.conformance._options import DEFAULT_FACTORY, DEFAULT_MAX_BYTES, DEFAULT_WORLD_SIZES, CheckOptions
from fuzzdist.conformance._rank import resolve_factory
from fuzzdist.conformance._report import (
    UNSUPPORTED_PATTERNS,
    ConformanceReport,
    Failure,
    OpReport,
    Unsupported,
    unsupported_reason,
)
from fuzzdist.conformance.ops import OPS, REDUCE_OPS, REDUCE_OPS_BY_KIND, OpCall, OpInfo
from fuzzdist.errors import ConformanceFailure, FactoryError

__all__ = [
    "ALL_CHECKS",
    "ASYNC",
    "DDP",
    "DEFAULT_FACTORY",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_WORLD_SIZES",
    "OPS",
    "REDUCE_OPS",
    "REDUCE_OPS_BY_KIND",
    "UNSUPPORTED_PATTERNS",
    "CheckOptions",
    "ConformanceFailure",
    "ConformanceReport",
    "ConformanceSession",
    "FactoryError",
    "Failure",
    "OpCall",
    "OpInfo",
    "OpReport",
    "Unsupported",
    "all_checks",
    "check_process_group",
    "gloo",
    "gloo_backend",
    "resolve_factory",
    "unsupported_reason",
]
