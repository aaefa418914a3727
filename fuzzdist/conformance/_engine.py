"""The driver of a conformance check: build the group on every rank, probe, fuzz, report."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from hypothesis import HealthCheck, Verbosity, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as Settings
from hypothesis import strategies as st

from fuzzdist import known_bugs
from fuzzdist import strategies as fst
from fuzzdist.conformance import _rank
from fuzzdist.conformance._checks import ASYNC, DDP, all_checks
from fuzzdist.conformance._draw import programs, wait_sequence
from fuzzdist.conformance._report import (
    ConformanceReport,
    Failure,
    OpReport,
    Unsupported,
    dtype_name,
    unsupported_reason,
)
from fuzzdist.conformance.ops import OPS, REDUCE_OPS, Capabilities, OpCall, OpInfo
from fuzzdist.conformance.ops._base import LAYOUT_VARIANT, UNEVEN_VARIANT
from fuzzdist.errors import (
    ConformanceFailure,
    InvalidArgument,
    RankCrash,
    RankError,
    RankFailure,
    RankTimeout,
)
from fuzzdist.pool import DEFAULT_TIMEOUT, RankPool
from fuzzdist.properties import ddp as ddp_property

DEFAULT_WORLD_SIZES: tuple[int, ...] = (1, 2, 3)
DEFAULT_MAX_BYTES = 16 * 1024
DEFAULT_FACTORY = "fuzzdist.conformance:gloo"
_UNLIMITED_EXAMPLES = 1_000_000  # with a duration and no max_examples: the clock decides
_MAX_MESSAGE = 6000

PoolsArg = Mapping[int, RankPool] | Callable[[int], RankPool] | None


class _OutOfTime(BaseException):
    """The op's share of the duration is spent (a BaseException, so Hypothesis lets it through)."""


class _Refused(BaseException):
    """The DDP check hit an operation the group does not implement."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _dtype_kinds(device: str) -> dict[torch.dtype, str]:
    kinds = {}
    for kind in fst.DTYPE_KINDS:
        for dtype in fst.supported_dtypes(device, kind):
            kinds[dtype] = kind
    return kinds


def _failure_text(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + "\n... (truncated)"


def _rank_exceptions(exc: RankFailure) -> list[tuple[int, str, str]]:
    """(rank, exception type, message) of each failed rank, lowest rank first."""
    if isinstance(exc, RankError):
        return [(r, exc.exc_types[r], str(exc.exceptions[r])) for r in sorted(exc.exceptions)]
    return []


class ConformanceSession:
    """A conformance check of one ProcessGroup factory, run op by op.

    ``check_process_group`` runs every op and closes it; the pytest plugin
    keeps one per session and runs one op per test.  The group is built on
    each world size's ranks once (``prepare``), then every operation is
    probed there; ``run(op)`` fuzzes one operation and returns its
    ``OpReport``.
    """

    def __init__(
        self,
        factory: str | Callable[..., Any],
        *,
        world_sizes: Iterable[int] = DEFAULT_WORLD_SIZES,
        max_examples: int | None = None,
        duration: float | None = None,
        dtypes: Iterable[torch.dtype] | None = None,
        device: str = "cpu",
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        pools: PoolsArg = None,
        settings: Settings | None = None,
        verbose: bool = False,
        seed: int | None = None,
        repeat_waits: bool = True,
        ddp_reorder: bool = False,
        checks: Iterable[str] | None = None,
    ) -> None:
        self.ref = _rank.factory_ref(factory)
        sizes = tuple(sorted(set(world_sizes)))
        if not sizes or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in sizes):
            raise InvalidArgument(f"world_sizes must be positive ints, got {tuple(world_sizes)!r}")
        if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
            raise InvalidArgument(f"max_examples must be a positive int, got {max_examples!r}")
        if duration is not None and not duration > 0:
            raise InvalidArgument(f"duration must be a positive number of seconds, got {duration!r}")
        self.world_sizes = sizes
        self.device = device
        self.timeout = float(timeout)
        self.max_bytes = int(max_bytes)
        self.verbose = verbose
        self.seed = seed
        self.repeat_waits = repeat_waits
        self.ddp_reorder = ddp_reorder
        self._settings = settings
        self._max_examples = max_examples
        self._kinds = _dtype_kinds(device)
        self._dtypes = tuple(self._kinds) if dtypes is None else tuple(dtypes)
        unknown = [d for d in self._dtypes if d not in self._kinds]
        if unknown:
            raise InvalidArgument(f"dtypes {unknown} can't be built on {device!r}; choose from {tuple(self._kinds)}")
        self._pools_arg = pools
        self._own_pools: dict[int, RankPool] = {}
        self._caps: dict[int, Capabilities] = {}
        self._form_failures: dict[str, list[str]] = {}  # op -> "world size w, form=...: its probe hung: ..."
        self._backends: dict[int, str] = {}  # world size -> the group's name() (or type): known bugs are per backend
        self._refused: dict[tuple[str, str | None, str | None], tuple[str, list[int]]] = {}
        self._probed: dict[tuple[str, str | None], set[str | None]] = {}  # (op, variant) -> dtypes probed
        # op -> (known bug, example, failure): known torch bugs its probes met, tallied when the op runs
        self._probe_sightings: dict[str, list[tuple[known_bugs.KnownBug, dict[str, Any], BaseException]]] = {}
        self._started = time.monotonic()
        self._deadline = None if duration is None else self._started + float(duration)
        known = all_checks()
        self.checks = tuple(known if checks is None else checks)
        unknown_checks = [c for c in self.checks if c not in known]
        if unknown_checks:
            raise InvalidArgument(f"unknown checks {unknown_checks}; choose from {', '.join(known)}")
        # the operations to probe: the ones checked (the async check draws from all of them)
        self._probe_ops = set(OPS) if ASYNC in self.checks else {c for c in self.checks if c in OPS}
        self._checks_left = len(self.checks)
        self._check_deadline: float | None = None
        self.report = ConformanceReport(self.ref, sizes)

    # -- pools --------------------------------------------------------------------

    def pool(self, world_size: int) -> RankPool:
        arg = self._pools_arg
        if arg is None:
            pool = self._own_pools.get(world_size)
            if pool is None:
                pool = self._own_pools[world_size] = RankPool(world_size, "gloo", self.device, self.timeout)
            return pool
        if isinstance(arg, Mapping):
            return arg[world_size]
        return arg(world_size)

    def close(self) -> None:
        for pool in self._own_pools.values():
            pool.close()
        self._own_pools.clear()

    def __enter__(self) -> ConformanceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building and probing ----------------------------------------------------------

    def prepare(self) -> None:
        """Build the group and probe every operation at each world size (once)."""
        for w in self.world_sizes:
            if w not in self._caps and w not in self.report.factory_errors:
                self._prepare(w)

    def _prepare(self, w: int) -> None:
        pool = self.pool(w)
        try:
            infos = pool.run(_rank.build, self.ref)
        except RankFailure as exc:
            self.report.factory_errors[w] = f"the factory raised while building the group:\n{_failure_text(exc)}"
            try:
                pool.run(_rank.forget, self.ref)
            except RankFailure:
                pass
            return
        wrong = [f"rank {r}'s group says rank {i['rank']} of {i['size']}" for r, i in enumerate(infos)
                 if (i["rank"], i["size"]) != (r, w)]
        if wrong:  # a failure, and no reason to leave the collectives unchecked: they run on the pool's ranks
            self.report.factory_errors[w] = (
                f"the group's rank()/size() disagree with the ranks it was built on (world size {w}): "
                + "; ".join(wrong) + ". Its operations were checked all the same, each rank as the rank "
                "the factory was called with.")
        self._backends[w] = infos[0]["name"] or infos[0]["type"]
        if not self.report.backend:
            self.report.backend = self._backends[w]
        self._caps[w] = self._probe(w)

    def _probe_plan(self, w: int) -> list[tuple[tuple[str, str | None, torch.dtype | None], OpCall]]:
        plan = []
        for op, info in OPS.items():
            if w < info.min_world or op not in self._probe_ops:
                continue
            for reduce_op, dtype, call in info.probes(w, self._dtypes, self._kinds):
                plan.append(((op, reduce_op, dtype), call))
        return plan

    def _probe(self, w: int) -> Capabilities:
        caps = Capabilities(w)
        plan = self._probe_plan(w)
        results = self._run_probes(w, [call for _, call in plan])
        supported: dict[tuple[str, str | None], list[Any]] = {}  # dtypes (None: the op takes no tensor)
        for (key, _call), result in zip(plan, results, strict=False):
            op, reduce_op, dtype = key
            supported.setdefault((op, reduce_op), [])
            variant = f"ReduceOp.{reduce_op}" if reduce_op else None
            self._probed.setdefault((op, variant), set()).add(None if dtype is None else dtype_name(dtype))
            if isinstance(result, str):  # hung or crashed
                caps.hung[op] = result
                continue
            reason = None if result is None else unsupported_reason(result[0], result[1], OPS[op].method)
            if reason is None:
                supported[(op, reduce_op)].append(dtype)
            else:
                self._refuse(op, variant, None if dtype is None else dtype_name(dtype), reason, w)
        caps.dtypes = {k: tuple(v) for k, v in supported.items()}
        # Variants, probed with the first dtype (and reduce op) each op accepted: memory
        # layouts of the main input, and uneven all-to-all splits.  Here any clean
        # exception is a refusal (the plain call worked), e.g. "tensors must be contiguous".
        variant_plan: list[tuple[tuple[str, str], OpCall]] = []
        for op, info in OPS.items():
            if not caps.available(op):
                continue
            reduce_op = caps.reduce_ops(op)[0] if info.reduces else None
            dtype = caps.dtypes[(op, reduce_op)][0]
            variant_plan.extend(((op, variant), call) for variant, call in info.variant_probes(w, dtype, reduce_op))
        results = self._run_probes(w, [call for _, call in variant_plan])
        for op in OPS:
            caps.layouts[op] = ("contiguous",)
        for ((op, variant), _), result in zip(variant_plan, results, strict=False):
            self._probed.setdefault((op, variant), set()).add(None)
            if isinstance(result, str):
                caps.hung[op] = result
                continue
            if result is None:
                if variant.startswith(LAYOUT_VARIANT):
                    caps.layouts[op] = caps.layouts[op] + (variant[len(LAYOUT_VARIANT):],)
                continue
            reason = unsupported_reason(result[0], result[1], OPS[op].method) or (
                f"{result[0].rsplit('.', 1)[-1]}: {(result[1].strip().splitlines() or [''])[0]}")
            self._refuse(op, variant, None, reason, w)
            if variant == UNEVEN_VARIANT:
                caps.uneven[op] = False
        for op, info in OPS.items():  # other argument forms: one probe each, as one may abort the ranks
            if not info.forms or not caps.available(op):
                continue
            reduce_op = caps.reduce_ops(op)[0] if info.reduces else None
            for form, call in info.form_probes(w, caps.dtypes[(op, reduce_op)][0], reduce_op):
                if self._probe_form(w, caps, op, form, call):
                    caps.forms[op] = caps.forms.get(op, ()) + (form,)
        return caps

    def _probe_form(self, w: int, caps: Capabilities, op: str, form: str, call: OpCall) -> bool:
        """Whether ``op`` accepts its argument form ``form``.  A probe that meets a known torch bug (gloo
        fails a CHECK on reduce_scatter_tensor's "stack" form) is a sighting, reported with the op, and
        the form is not drawn: probed once per world size, a bug that aborts the ranks costs one pool
        restart per run, not one per example."""
        variant = f"form={form}"
        self._probed.setdefault((op, variant), set()).add(None)
        example = self._example(w, call=call)
        try:
            per_rank = self.pool(w).run(_rank.probe, self.ref, (call,))
        except RankFailure as exc:
            self._reset(w)
            bug = known_bugs.recognise(f"check-pg:{op}", example, exc)
            if bug is not None:
                self._probe_sightings.setdefault(op, []).append((bug, example, exc))
                return False
            result = self._probe_failure(exc)
            if isinstance(result, str):  # a failure of this form only: the plain form is still fuzzed
                self._form_failures.setdefault(op, []).append(f"world size {w}, {call.describe()}: {result}")
            else:
                self._refuse(op, variant, None, unsupported_reason(result[0], result[1], OPS[op].method)
                             or f"{result[0].rsplit('.', 1)[-1]}: {(result[1].strip().splitlines() or [''])[0]}", w)
            return False
        raised = [r[0] for r in per_rank if r[0] is not None]
        if raised:
            type_name, message = raised[0]
            error = ConformanceFailure(f"{call.describe()} raised on the ranks: {type_name}: {message}")
            bug = known_bugs.recognise(f"check-pg:{op}", example, error)
            if bug is not None:
                self._probe_sightings.setdefault(op, []).append((bug, example, error))
                return False
            self._refuse(op, variant, None, unsupported_reason(type_name, message, OPS[op].method)
                         or f"{type_name.rsplit('.', 1)[-1]}: {(message.strip().splitlines() or [''])[0]}", w)
            return False
        return True

    def _example(self, w: int, **fields: Any) -> dict[str, Any]:
        """An example's fields for the report and the known-bug predicates (which look at the backend)."""
        return {"world_size": w, **fields, "backend": self._backends.get(w, "")}

    def _refuse(self, op: str, variant: str | None, dtype: str | None, reason: str, w: int) -> None:
        key = (op, variant, dtype)
        known = self._refused.get(key)
        if known is None:
            self._refused[key] = (reason, [w])
        elif w not in known[1]:
            known[1].append(w)

    def _run_probes(self, w: int, calls: list[OpCall]) -> list[Any]:
        """Per call: None (ran), (type, message) (raised), or a string (hung or crashed the ranks).

        One pool call for the whole batch; if that fails (a probe hung, or
        raised on some ranks only), per op, then one call per probe.
        """
        if not calls:
            return []
        pool = self.pool(w)
        try:
            per_rank = pool.run(_rank.probe, self.ref, tuple(calls))
        except RankFailure as exc:
            if len(calls) == 1:
                return [self._probe_failure(exc)]
            ops = sorted({c.op for c in calls}, key=list(OPS).index)
            if len(ops) > 1:
                by_op: dict[Any, list[int]] = {op: [i for i, c in enumerate(calls) if c.op == op] for op in ops}
            else:
                by_op = {i: [i] for i in range(len(calls))}
            results: list[Any] = [None] * len(calls)
            for indices in by_op.values():
                for i, result in zip(indices, self._run_probes(w, [calls[i] for i in indices]), strict=False):
                    results[i] = result
            return results
        merged = []
        for i, call in enumerate(calls):
            raised = [per_rank[r][i] for r in range(w) if per_rank[r][i] is not None]
            refusals = [e for e in raised if unsupported_reason(e[0], e[1], call.info.method)]
            merged.append(refusals[0] if refusals else (raised[0] if raised else None))
        return merged

    def _probe_failure(self, exc: RankFailure) -> Any:
        found = _rank_exceptions(exc)
        for _, type_name, message in found:
            if unsupported_reason(type_name, message):
                return (type_name, message)
        if found:
            return (found[0][1], found[0][2])
        kind = ("hung" if isinstance(exc, RankTimeout)
                else "crashed the ranks" if isinstance(exc, RankCrash) else "failed")
        return f"its probe {kind}:\n{_failure_text(exc)}"

    # -- fuzzing --------------------------------------------------------------------

    def _hypothesis_settings(self) -> Settings:
        parent = self._settings if self._settings is not None else Settings()
        max_examples = self._max_examples
        if max_examples is None:
            max_examples = _UNLIMITED_EXAMPLES if self._deadline is not None else parent.max_examples
        suppressed = set(parent.suppress_health_check) | {
            HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large}
        return Settings(parent, max_examples=max_examples, deadline=None, report_multiple_bugs=False,
                        suppress_health_check=list(suppressed), print_blob=False,
                        verbosity=parent.verbosity if self.verbose else Verbosity.quiet)

    def _op_calls(self, info: OpInfo, w: int, *, reduce_op: str | None = None) -> st.SearchStrategy:
        """The calls of ``info`` drawn at world size ``w`` (``reduce_op`` fixed, if given)."""
        return info.calls(self._caps[w], self.max_bytes, reduce_op=reduce_op)

    def _fuzz(self, name: str, sizes: list[int], draw_example: Callable[[int], st.SearchStrategy],
              execute: Callable[[int, Any, list[Failure]], None], report: OpReport, *, share: int = 1,
              variant: str = "", parts_left: int = 1) -> None:
        """Run Hypothesis over ``sizes`` x ``draw_example(w)``; ``execute`` appends a Failure and raises.

        ``share``: run 1/share of the examples (for checks whose examples are
        slow).  ``variant`` names one of several runs of a check (its own
        database entries); ``parts_left`` the runs of this check still to go,
        this one included, which share what is left of its time.
        """
        failing: list[Failure] = []
        count = [0]
        ran_at: set[int] = set()  # the world sizes examples ran at
        deadline = None
        if self._check_deadline is not None:
            now = time.monotonic()
            deadline = now + max(0.0, self._check_deadline - now) / max(1, parts_left)

        def body(data: st.DataObject) -> None:
            w = data.draw(st.sampled_from(sizes), label="world_size")
            example = data.draw(draw_example(w), label=name)
            if deadline is not None and not failing and time.monotonic() > deadline:
                raise _OutOfTime()
            count[0] += 1
            ran_at.add(w)
            execute(w, example, failing)

        from fuzzdist.compat.hypothesis_internals import set_extra_digest

        set_extra_digest(body, f"fuzzdist.conformance|{self.ref}|{name}|{variant}|{sizes}".encode())
        hypothesis_settings = self._hypothesis_settings()
        if share > 1 and self._max_examples is None and self._deadline is None:
            hypothesis_settings = Settings(hypothesis_settings,
                                           max_examples=max(1, hypothesis_settings.max_examples // share))
        test = hypothesis_settings(given(data=st.data())(body))
        if self.seed is not None:
            test = hypothesis_seed(self.seed)(test)
        try:
            test()
        except _OutOfTime:
            pass
        except _Refused as refused:
            report.status = "unsupported"
            report.unsupported.append(Unsupported(name, None, (), tuple(sizes), refused.reason))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - Hypothesis's final (shrunk) failure
            flaky = type(exc).__name__.startswith("Flaky")
            if failing:
                failure = failing[-1]
                failure.flaky = flaky
            else:
                failure = Failure(name, f"{name}: {type(exc).__name__}: {_failure_text(exc)}", exception=exc,
                                  flaky=flaky)
            report.failure = failure
            report.status = "failed"
        report.examples += count[0]
        report.world_sizes = sorted(ran_at.union(report.world_sizes))

    @staticmethod
    def _finish(report: OpReport) -> None:
        if report.status == "not run":
            report.status = "conforms" if report.examples else "not run"
            if not report.examples:
                report.note = "no example ran within the duration"

    def run(self, name: str) -> OpReport:
        """Fuzz one check (an op of ``OPS``, ``"async"`` or ``"ddp_parity"``); its report."""
        if name not in self.checks:
            raise InvalidArgument(f"unknown check {name!r}; this session checks {', '.join(self.checks)}")
        self.prepare()
        if name in self.report.ops and self.report.ops[name].status != "not run":
            return self.report.ops[name]
        report = OpReport(name, method=OPS[name].method if name in OPS else "")
        self.report.ops[name] = report
        self._check_deadline = None
        if self._deadline is not None:
            now = time.monotonic()
            self._check_deadline = now + max(0.0, self._deadline - now) / max(1, self._checks_left)
        try:
            with known_bugs.collecting() as tally:  # known torch bugs' sightings: counted, not failures
                for bug, example, failure in self._probe_sightings.get(name, ()):
                    tally.add(bug, example, failure)
                if name == ASYNC:
                    self._run_async(report)
                elif name == DDP:
                    self._run_ddp(report)
                else:
                    self._run_op(name, report)
            report.known = tally.as_json()
            if tally and report.status == "conforms":
                report.status = "known"
        finally:
            self._checks_left = max(1, self._checks_left - 1)
            self.report.duration_s = time.monotonic() - self._started
        return report

    def _run_op(self, op: str, report: OpReport) -> None:
        info = OPS[op]
        report.unsupported = self._unsupported_for(op)
        hung = [f"world size {w}: {caps.hung[op]}" for w, caps in self._caps.items() if op in caps.hung]
        if hung:
            report.status = "failed"
            report.failure = Failure(op, f"{op} ({info.method}) did not complete when probed with a 2-element "
                                         f"tensor:\n" + "\n".join(hung), {"probe": True})
            self._report_form_failures(op, report)
            return
        sizes = [w for w, caps in sorted(self._caps.items()) if caps.available(op)]
        if not sizes:
            built = list(self._caps)
            if built and all(w < info.min_world for w in built):
                report.status = "not applicable"
                report.note = f"needs {info.min_world} or more ranks"
            elif built:
                report.status = "unsupported"
            else:
                report.note = "the factory did not build a group"
            return
        report.supported = self._supported_for(op, sizes)

        def execute(w: int, call: OpCall, failing: list[Failure]) -> None:
            head = (f"{op} does not conform: {call.describe()} with world_size={w} "
                    f"(ProcessGroup.{info.method}, called as torch.distributed.{info.mirrors} calls it)")
            example = self._example(w, call=call)
            try:
                observed = self.pool(w).run(_rank.run_calls, self.ref, (call,))
            except RankFailure as exc:
                self._reset(w)
                if known_bugs.sighted(f"check-pg:{op}", example, exc):
                    return
                failing.append(Failure(op, self._raised_message(head, exc, call), example, exc))
                raise
            problems = info.check(call, w, [obs[0] for obs in observed])
            if problems:
                message = head + "\n" + "\n".join(f"  {p}" for p in problems) + "\n" + info.inputs_summary(call, w)
                failure = ConformanceFailure(message)
                if known_bugs.sighted(f"check-pg:{op}", example, failure):
                    return
                failing.append(Failure(op, message.rstrip(), example))
                raise failure

        if not info.reduces:
            self._fuzz(op, sizes, lambda w: info.calls(self._caps[w], self.max_bytes), execute, report)
        else:
            # One run per reduce op, each with the full example budget: backends implement them
            # separately, and a single run would give each only a fraction of its examples.
            reduce_ops = [r for r in REDUCE_OPS if any(r in self._caps[w].reduce_ops(op) for w in sizes)]
            for i, reduce_op in enumerate(reduce_ops):
                if report.failure is not None:
                    break
                op_sizes = [w for w in sizes if reduce_op in self._caps[w].reduce_ops(op)]
                self._fuzz(op, op_sizes, functools.partial(self._op_calls, info, reduce_op=reduce_op),
                           execute, report, variant=reduce_op, parts_left=len(reduce_ops) - i)
        self._report_form_failures(op, report)
        self._finish(report)

    def _report_form_failures(self, op: str, report: OpReport) -> None:
        """An argument form whose probe hung or crashed is a failure of ``op`` (that form only: the
        plain form was fuzzed all the same); a failure the fuzzing found keeps the report's failure
        slot, and the form's is named in the note."""
        failed = self._form_failures.get(op)
        if not failed:
            return
        message = (f"{op} ({OPS[op].method}) did not complete when probed in another argument form "
                   "(the plain form was fuzzed all the same):\n" + "\n".join(failed))
        if report.failure is None:
            report.status = "failed"
            report.failure = Failure(op, message, {"probe": True})
        else:
            also = f"also: {message.splitlines()[0]} ({len(failed)} probe(s))"
            report.note = f"{report.note}; {also}" if report.note else also

    def _reset(self, w: int) -> None:
        """After an example failed on the ranks: a fresh group for the next one (see _rank.forget)."""
        try:
            self.pool(w).run(_rank.forget, self.ref)
        except RankFailure:
            pass

    def _raised_message(self, head: str, exc: RankFailure, call: OpCall | None) -> str:
        lines = [head.replace(" does not conform:", " raised:", 1)]
        refusals = [(r, unsupported_reason(t, m)) for r, t, m in _rank_exceptions(exc)]
        if any(reason for _, reason in refusals):
            lines.append("  (it refused these arguments as unsupported, but the probe found the operation "
                         "and dtype supported: a backend must accept every shape, layout and root)")
        lines.append(_failure_text(exc))
        return "\n".join(lines)

    def _run_async(self, report: OpReport) -> None:
        sizes = []
        for w, caps in sorted(self._caps.items()):
            if [op for op in OPS if caps.available(op)]:
                sizes.append(w)
        if not sizes:
            report.status = "unsupported"
            report.note = "no operation is supported"
            return

        def draw(w: int) -> st.SearchStrategy:
            caps = self._caps[w]
            return programs(caps, tuple(op for op in OPS if caps.available(op)), max(64, self.max_bytes // 4),
                            repeat_waits=self.repeat_waits)

        def execute(w: int, program: Any, failing: list[Failure]) -> None:
            calls, order = program
            waits = wait_sequence(order)
            head = (f"async: {len(calls)} calls issued with async_op=True before any wait, then waited in the "
                    f"order {list(waits)} ({order!r}), with world_size={w}:\n"
                    + "\n".join(f"  call {i}: {c.describe()}" for i, c in enumerate(calls)))
            example = self._example(w, calls=calls, wait_order=waits, order=order)
            try:
                observed = self.pool(w).run(_rank.run_calls, self.ref, calls, waits)
            except RankFailure as exc:
                self._reset(w)
                if known_bugs.sighted(f"check-pg:{ASYNC}", example, exc):
                    return
                failing.append(Failure(ASYNC, self._raised_message(head, exc, None), example, exc))
                raise
            problems = []
            for i, call in enumerate(calls):
                for p in call.info.check(call, w, [obs[i] for obs in observed]):
                    problems.append(f"call {i} ({call.op}): {p}")
            if problems:
                message = head + "\n" + "\n".join(f"  {p}" for p in problems)
                failure = ConformanceFailure(message)
                if known_bugs.sighted(f"check-pg:{ASYNC}", example, failure):
                    return
                failing.append(Failure(ASYNC, message, example))
                raise failure

        report.supported = ["every supported operation, 2 to 4 in flight"]
        self._fuzz(ASYNC, sizes, draw, execute, report)
        self._finish(report)

    def _run_ddp(self, report: OpReport) -> None:
        sizes = sorted(self._caps)
        if not sizes:
            report.note = "the factory did not build a group"
            return
        kinds = ["direct"]
        if self.ddp_reorder:
            kinds += ["reorder-subclass", "reorder-future"]

        def draw(w: int) -> st.SearchStrategy:
            @st.composite
            def example(d: st.DrawFn) -> tuple:
                config = d(fst.ddp_configs(w))
                dtype = d(st.sampled_from([torch.float32, torch.float64]))
                seed = d(st.integers(0, 2**32 - 1))
                kind = d(st.sampled_from(kinds))
                schedule = d(ddp_property.completion_schedules()) if kind != "direct" else None
                return config, dtype, seed, kind, schedule
            return example()

        def execute(w: int, example: tuple, failing: list[Failure]) -> None:
            config, dtype, seed, kind, schedule = example
            through = "the group" if kind == "direct" else f"a ReorderingProcessGroup ({kind}, {schedule!r}) over it"
            head = f"DDP parity through {through}, world_size={w}, {dtype}, seed={seed}, {config!r}"
            fields = {"world_size": w, "config": config, "dtype": dtype, "seed": seed, "pg_kind": kind,
                      "schedule": schedule}
            try:
                results = self.pool(w).run(_rank.ddp_parity, self.ref, config, dtype, seed, kind, schedule)
            except RankFailure as exc:
                self._reset(w)
                found = _rank_exceptions(exc)
                reasons = [unsupported_reason(t, m) for _, t, m in found]
                if found and all(reasons) and kind == "direct":
                    raise _Refused(f"DDP needs an operation the group does not implement: {reasons[0]}") from exc
                failing.append(Failure(DDP, f"{head}: raised\n{_failure_text(exc)}", fields, exc))
                raise
            try:
                ddp_property.check_parity(results)
            except AssertionError as exc:
                failing.append(Failure(DDP, f"{head}:\n  {exc}", fields))
                raise ConformanceFailure(f"{head}: {exc}") from None

        report.supported = [f"DistributedDataParallel over it ({', '.join(kinds)})"]
        # Each example trains a model: a quarter of the profile's examples, unless asked otherwise.
        self._fuzz(DDP, sizes, draw, execute, report, share=4)
        self._finish(report)

    # -- report pieces --------------------------------------------------------------------

    def _unsupported_for(self, op: str) -> list[Unsupported]:
        """What ``op`` refused, one entry per (reason, world sizes, dtypes), ReduceOps merged."""
        entries = [(variant, dtype, reason, tuple(sorted(ws)))
                   for (o, variant, dtype), (reason, ws) in self._refused.items() if o == op]
        if not entries:
            return []
        # One line for the whole op when every probe of it was refused for the same reason.
        probed = sum(len(d) for (o, v), d in self._probed.items() if o == op)
        reasons = {(reason, sizes) for _, _, reason, sizes in entries}
        if len(entries) == probed and len(reasons) == 1:
            reason, sizes = reasons.pop()
            return [Unsupported(op, None, (), sizes, reason)]
        by_variant: dict[tuple[str | None, str, tuple[int, ...]], list[str | None]] = {}
        for variant, dtype, reason, sizes in entries:
            by_variant.setdefault((variant, reason, sizes), []).append(dtype)
        merged: dict[tuple[str, tuple[int, ...], tuple[str, ...], bool], list[str | None]] = {}
        for (variant, reason, sizes), dtypes in by_variant.items():
            every = set(dtypes) == self._probed.get((op, variant), set())
            shown = () if every or dtypes == [None] else tuple(d for d in dtypes if d is not None)
            is_reduce = bool(variant and variant.startswith("ReduceOp."))
            key = (reason, sizes, shown, is_reduce)
            merged.setdefault(key, []).append(variant)
        all_reduce_ops = [v for (o, v) in self._probed if o == op and v and v.startswith("ReduceOp.")]
        out: list[Unsupported] = []
        for (reason, sizes, shown, is_reduce), variants in merged.items():
            if not is_reduce:
                out.extend(Unsupported(op, v, shown, sizes, reason) for v in variants)
            elif sorted(v for v in variants if v) == sorted(all_reduce_ops):  # every variant is "ReduceOp.X"
                out.append(Unsupported(op, "every ReduceOp" if shown else None, shown, sizes, reason))
            else:
                names = [v.split(".", 1)[1] for v in variants if v]
                out.append(Unsupported(op, "ReduceOp." + "/".join(names), shown, sizes, reason))
        return out

    def _supported_for(self, op: str, sizes: list[int]) -> list[str]:
        variants: dict[str | None, list[str]] = {}
        for w in sizes:
            for (o, reduce_op), dtypes in self._caps[w].dtypes.items():
                if o != op or not dtypes:
                    continue
                seen = variants.setdefault(reduce_op, [])
                seen.extend(dtype_name(d) for d in dtypes if dtype_name(d) not in seen)
        lines = [(f"ReduceOp.{r}: " if r else "") + ", ".join(d) for r, d in variants.items() if OPS[op].needs_dtypes]
        layouts = sorted({lay for w in sizes for lay in self._caps[w].layouts.get(op, ())},
                         key=("contiguous", "sliced", "transposed", "channels_last").index)
        if OPS[op].layouts:
            lines.append("layouts: " + ", ".join(layouts))
        return lines


def check_process_group(
    factory: str | Callable[..., Any],
    *,
    world_sizes: Iterable[int] = DEFAULT_WORLD_SIZES,
    max_examples: int | None = None,
    duration: float | None = None,
    ops: Iterable[str] | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
    device: str = "cpu",
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    pools: PoolsArg = None,
    settings: Settings | None = None,
    verbose: bool = False,
    seed: int | None = None,
    repeat_waits: bool = True,
    ddp_reorder: bool = False,
) -> ConformanceReport:
    """Fuzz the ProcessGroup that ``factory`` builds against the c10d contract.

    Args:
        factory: ``"module:callable"`` (or an importable top-level callable)
            called on every rank as ``factory(rank, world_size, store,
            device)``; returns a ``dist.ProcessGroup`` (a Python subclass
            too) or a ``dist.Backend``.  ``store`` is a c10d store private
            to this factory.  It is called once per rank process and world
            size; the group is reused for every example.
        world_sizes: the world sizes to check; each example draws one.
        max_examples: examples per check (default: the current Hypothesis
            profile's, or unlimited when ``duration`` is given).
        duration: seconds for the whole check, shared out between the
            checks; a failure found in time is still shrunk.
        ops: the checks to run, from ``ALL_CHECKS`` and any op registered in
            ``OPS`` since (default: all).
        dtypes: the dtypes to probe and fuzz (default: every dtype fuzzdist
            can build on ``device``).
        device: "cpu" or "cuda": the ranks' device (``ctx.device``).
        timeout: seconds one example may take before it is a hang.
        max_bytes: the largest tensor an example uses.
        pools: rank pools to reuse: ``{world_size: RankPool}`` or a callable
            ``world_size -> RankPool`` (default: new pools, closed at the end).
        settings: Hypothesis settings to start from (default: the current
            profile); ``database=None`` and ``derandomize=True`` make a
            check repeatable.
        verbose: let Hypothesis print its own progress and failing examples.
        seed: a Hypothesis seed, for a repeatable run.
        repeat_waits: the async check also calls ``wait()`` again on works
            already waited on (a repeated wait must return within
            ``_rank.REPEAT_WAIT_S``; gloo's send/recv Work blocks on it: known
            torch bug gloo-p2p-second-wait-blocks, counted, not a failure).
        ddp_reorder: the DDP check also runs DDP through a
            ``fuzzdist.toolkit.reorder.ReorderingProcessGroup`` over the group, its
            allreduces completing in a drawn order.

    Returns:
        A ``ConformanceReport``: ``.conforms``, ``.failures`` (each shrunk,
        with the operation, its arguments, expected and actual values),
        ``.unsupported`` (what the backend refused, reported once each) and
        ``.ops[name]`` per check.
    """
    checks = tuple(all_checks() if ops is None else ops)
    session = ConformanceSession(factory, world_sizes=world_sizes, max_examples=max_examples, duration=duration,
                                 dtypes=dtypes, device=device, timeout=timeout, max_bytes=max_bytes, pools=pools,
                                 settings=settings, verbose=verbose, seed=seed, repeat_waits=repeat_waits,
                                 ddp_reorder=ddp_reorder, checks=checks)
    try:
        session.prepare()
        for name in checks:
            session.run(name)
        return session.report
    finally:
        session.close()
