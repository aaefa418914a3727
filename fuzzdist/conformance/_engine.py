"""The orchestration of a conformance check: the rank pools, then per check its share of the time,
the known torch bugs it met, and its report; ``check_process_group`` runs every check once.

The jobs themselves live beside it: :mod:`._options` (the options, validated), :mod:`._probe`
(building the group and probing what it implements), :mod:`._fuzzing` (one check under
Hypothesis), :mod:`._op_check` (the check of one operation) and :mod:`._composite` (``async`` and
``ddp_parity``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fuzzdist import known_bugs
from fuzzdist.conformance import _rank
from fuzzdist.conformance._checks import ASYNC, DDP
from fuzzdist.conformance._composite import run_async, run_ddp
from fuzzdist.conformance._fuzzing import Fuzzer
from fuzzdist.conformance._op_check import run_op
from fuzzdist.conformance._options import CheckOptions, dtype_kinds
from fuzzdist.conformance._probe import GroupProbe
from fuzzdist.conformance._report import ConformanceReport, OpReport
from fuzzdist.conformance.ops import OPS
from fuzzdist.errors import InvalidArgument
from fuzzdist.pool import RankPool


class ConformanceSession:
    """A conformance check of one ProcessGroup factory, run op by op.

    ``check_process_group`` runs every op and closes it; the pytest plugin
    keeps one per session and runs one op per test.  The group is built on
    each world size's ranks once (``prepare``), then every operation is
    probed there; ``run(op)`` fuzzes one operation and returns its
    ``OpReport``.

    Takes a :class:`CheckOptions`, and its fields as keyword arguments (which
    replace the options' own); ``checks`` is another name for ``ops``.
    """

    def __init__(
        self,
        factory: str | Callable[..., Any],
        options: CheckOptions | None = None,
        *,
        checks: Iterable[str] | None = None,
        **fields: Any,
    ) -> None:
        if checks is not None:
            fields["ops"] = checks
        options = CheckOptions.of(options, fields)
        self.ref = _rank.factory_ref(factory)
        self.options = options = options.checked()  # its collections are tuples now
        self.world_sizes: tuple[int, ...] = tuple(options.world_sizes)
        self.checks: tuple[str, ...] = tuple(options.ops or ())
        self._own_pools: dict[int, RankPool] = {}
        self._started = time.monotonic()
        self.report = ConformanceReport(self.ref, self.world_sizes)
        # the operations to probe: the ones checked (the async check draws from all of them)
        probe_ops = set(OPS) if ASYNC in self.checks else {c for c in self.checks if c in OPS}
        self._probe = GroupProbe(
            self.ref,
            self.pool,
            self.report,
            tuple(options.dtypes or ()),
            dtype_kinds(options.device),
            probe_ops,
            wraps=options.wraps,
        )
        self._fuzzer = Fuzzer(self.ref, options, self._started)
        self._to_fuzz = set(self.checks)  # the checks still to run that have something to fuzz
        self._prepared = False

    # -- pools --------------------------------------------------------------------

    def pool(self, world_size: int) -> RankPool:
        """The rank pool of ``world_size``: the options' ``pools``, else one of the session's own."""
        arg = self.options.pools
        if arg is None:
            pool = self._own_pools.get(world_size)
            if pool is None:
                pool = self._own_pools[world_size] = RankPool(
                    world_size, "gloo", self.options.device, self.options.timeout
                )
            return pool
        if isinstance(arg, Mapping):
            return arg[world_size]
        return arg(world_size)

    def close(self) -> None:
        """Close the pools the session started (not those it was given)."""
        for pool in self._own_pools.values():
            pool.close()
        self._own_pools.clear()

    def __enter__(self) -> ConformanceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the checks ------------------------------------------------------------------

    def prepare(self) -> None:
        """Build the group and probe every operation at each world size (once).  The time it takes
        counts against ``duration``, but the checks still get a share of it (``Fuzzer.probed``)."""
        if self._prepared:
            return
        started = time.monotonic()
        try:
            self._probe.prepare(self.world_sizes)
        finally:
            self.report.probe_s += time.monotonic() - started
            self.report.duration_s = time.monotonic() - self._started
        self._prepared = True
        self._fuzzer.probed()
        # An operation the group implements at no world size takes no time: the others share it.
        self._to_fuzz = {
            c for c in self._to_fuzz if c not in OPS or any(caps.available(c) for caps in self._probe.caps.values())
        }

    def run(self, name: str) -> OpReport:
        """Fuzz one check (an op of ``OPS``, ``"async"`` or ``"ddp_parity"``); its report."""
        if name not in self.checks:
            raise InvalidArgument(f"unknown check {name!r}; this session checks {', '.join(self.checks)}")
        self.prepare()
        if name in self.report.ops and self.report.ops[name].status != "not run":
            return self.report.ops[name]
        report = OpReport(name, method=OPS[name].method if name in OPS else "")
        self.report.ops[name] = report
        self._to_fuzz.add(name)  # (this one shares the time left in any case)
        self._fuzzer.start_check(len(self._to_fuzz))
        tally = known_bugs.Tally()
        try:
            with known_bugs.collecting() as tally:  # known torch bugs' sightings: counted, not failures
                for bug, example, failure in self._probe.sightings.get(name, ()):
                    tally.add(bug, example, failure)
                if name == ASYNC:
                    run_async(self._probe, self._fuzzer, report)
                elif name == DDP:
                    run_ddp(self._probe, self._fuzzer, report)
                else:
                    run_op(self._probe, self._fuzzer, name, report)
            if tally and report.status == "conforms":
                report.status = "known"
        finally:  # also when SIGINT/SIGTERM cut the check short: the partial report keeps its sightings
            report.known = tally.as_json()
            for known in report.known:  # a known bug of the wrapped backend's, met through the group
                if known["id"] in self._probe.inherited_bugs.get(name, ()):
                    known["inherited_from"] = self.options.wraps
            self._to_fuzz.discard(name)
            self.report.duration_s = time.monotonic() - self._started
        return report


def check_process_group(
    factory: str | Callable[..., Any], options: CheckOptions | None = None, **fields: Any
) -> ConformanceReport:
    """Fuzz the ProcessGroup that ``factory`` builds against the c10d contract.

    Args:
        factory: ``"module:callable"`` (or an importable top-level callable)
            called on every rank as ``factory(rank, world_size, store,
            device)``; returns a ``dist.ProcessGroup`` (a Python subclass
            too) or a ``dist.Backend``.  ``store`` is a c10d store private
            to this factory.  It is called once per rank process and world
            size; the group is reused for every example.
        options: a :class:`CheckOptions` (default: its defaults).
        **fields: any field of :class:`CheckOptions`, replacing the
            options' own: ``world_sizes``, ``max_examples``, ``duration``,
            ``ops``, ``dtypes``, ``device``, ``timeout``, ``max_bytes``,
            ``pools``, ``settings``, ``verbose``, ``seed``,
            ``repeat_waits``, ``ddp_reorder``, ``wraps`` (each described there).

    Returns:
        A ``ConformanceReport``: ``.conforms``, ``.failures`` (each shrunk,
        with the operation, its arguments, expected and actual values),
        ``.unsupported`` (what the backend refused, reported once each) and
        ``.ops[name]`` per check.
    """
    session = ConformanceSession(factory, options, **fields)
    try:
        session.prepare()
        for name in session.checks:
            session.run(name)
        return session.report
    finally:
        session.close()
