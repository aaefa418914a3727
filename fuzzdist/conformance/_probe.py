"""What the group implements: build it on each world size's ranks once, then probe every operation.

Each operation is probed per dtype (and per ReduceOp), then in its memory
layouts, uneven splits and other argument forms, with tiny tensors.  What
the backend refuses is reported once as unsupported and never fuzzed; a probe
that hangs or crashes the ranks is a failure of that operation; a probe that
meets a known torch bug is a sighting, tallied when the operation runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fuzzdist import known_bugs
from fuzzdist.conformance import _rank
from fuzzdist.conformance._options import WRAPPED_BACKENDS
from fuzzdist.conformance._report import (
    ConformanceReport,
    Unsupported,
    dtype_name,
    failure_text,
    rank_exceptions,
    unsupported_reason,
)
from fuzzdist.conformance.ops import OPS, Capabilities, OpCall
from fuzzdist.conformance.ops._base import LAYOUT_VARIANT, UNEVEN_VARIANT
from fuzzdist.errors import ConformanceFailure, RankCrash, RankFailure, RankTimeout
from fuzzdist.pool import RankPool
from fuzzdist.problems import Kind, Problem

# A probe result: not run, because an earlier probe of the same operation crashed the group.
SKIPPED = object()
CRASHED = "its probe crashed the group's own processes"  # how a probe result that did so begins


class GroupProbe:
    """The group ``ref`` builds, at every world size: built once per world size (``prepare``), its
    operations probed there; ``caps[w]`` holds what it implements at world size ``w``.

    ``pool(w)`` gives the rank pool of world size ``w``; ``report`` receives the factory's errors and
    the backend's name.  ``unsupported_for`` and ``supported_for`` summarise the probes for an op's report.
    """

    def __init__(
        self,
        ref: str,
        pool: Callable[[int], RankPool],
        report: ConformanceReport,
        dtypes: tuple[torch.dtype, ...],
        kinds: dict[torch.dtype, str],
        probe_ops: set[str],
        wraps: str | None = None,
    ) -> None:
        self.ref = ref
        self.wraps = wraps  # the backend the group delegates to, run as the reference (CheckOptions.wraps)
        self.inherited_bugs: dict[str, set[str]] = {}  # check -> ids of known bugs inherited from ``wraps``
        self.killer_dtypes: set[str] = set()  # dtypes whose probe killed the group's processes
        self.pool = pool
        self.report = report
        self._dtypes = dtypes
        self._kinds = kinds
        self._probe_ops = probe_ops  # the operations to probe: the ones checked (async draws from all)
        self.caps: dict[int, Capabilities] = {}
        self.form_failures: dict[str, list[str]] = {}  # op -> "world size w, form=...: its probe hung: ..."
        self._backends: dict[int, str] = {}  # world size -> the group's name() (or type): known bugs are per backend
        self._refused: dict[tuple[str, str | None, str | None], tuple[str, list[int]]] = {}
        self._probed: dict[tuple[str, str | None], set[str | None]] = {}  # (op, variant) -> dtypes probed
        # op -> (known bug, example, failure): known torch bugs its probes met, tallied when the op runs
        self.sightings: dict[str, list[tuple[known_bugs.KnownBug, dict[str, Any], BaseException]]] = {}

    # -- building and probing ----------------------------------------------------------

    def prepare(self, world_sizes: tuple[int, ...]) -> None:
        """Build the group and probe every operation at each world size (once)."""
        for w in world_sizes:
            if w not in self.caps and w not in self.report.factory_errors:
                self._prepare(w)

    def _prepare(self, w: int) -> None:
        pool = self.pool(w)
        try:
            infos = pool.run(_rank.build, self.ref)
        except RankFailure as exc:
            self.report.factory_errors[w] = f"the factory raised while building the group:\n{failure_text(exc)}"
            try:
                pool.run(_rank.forget, self.ref)
            except RankFailure:
                pass
            return
        wrong = [
            f"rank {r}'s group says rank {i['rank']} of {i['size']}"
            for r, i in enumerate(infos)
            if (i["rank"], i["size"]) != (r, w)
        ]
        if wrong:  # a failure, and no reason to leave the collectives unchecked: they run on the pool's ranks
            self.report.factory_errors[w] = (
                f"the group's rank()/size() disagree with the ranks it was built on (world size {w}): "
                + "; ".join(wrong)
                + ". Its operations were checked all the same, each rank as the rank "
                "the factory was called with."
            )
        self._backends[w] = infos[0]["name"] or infos[0]["type"]
        if not self.report.backend:
            self.report.backend = self._backends[w]
        self.caps[w] = self._probe(w)
        try:  # a probe that killed the group left it to be built again: now, not in the first check's time
            pool.run(_rank.build, self.ref)
        except RankFailure:
            pass

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
        results = self._run_probes(w, [call for _, call in plan], by_dtype=True)
        supported: dict[tuple[str, str | None], list[Any]] = {}  # dtypes (None: the op takes no tensor)
        for (key, call), result in zip(plan, results, strict=False):
            op, reduce_op, dtype = key
            if result is SKIPPED:  # after its crash: the op has failed, its other probes were not run
                continue
            if isinstance(result, str) and result.startswith(CRASHED):
                # a failure of this probe: what the op accepted before it is still fuzzed (on a new group)
                self.form_failures.setdefault(op, []).append(f"world size {w}, {call.describe()}: {result}")
                continue
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
            if result is SKIPPED:
                continue
            if isinstance(result, str) and result.startswith(CRASHED):
                self.form_failures.setdefault(op, []).append(f"world size {w}, {variant}: {result}")
                continue
            self._probed.setdefault((op, variant), set()).add(None)
            if isinstance(result, str):
                caps.hung[op] = result
                continue
            if result is None:
                if variant.startswith(LAYOUT_VARIANT):
                    caps.layouts[op] = caps.layouts[op] + (variant[len(LAYOUT_VARIANT) :],)
                continue
            reason = unsupported_reason(result[0], result[1], OPS[op].method) or (
                f"{result[0].rsplit('.', 1)[-1]}: {(result[1].strip().splitlines() or [''])[0]}"
            )
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
        example = self.example(w, call=call)
        try:
            per_rank = self.pool(w).run(_rank.probe, self.ref, (call,))
        except RankFailure as exc:
            died = self.deaths(w)
            self.reset(w)
            if died:
                self.form_failures.setdefault(op, []).append(
                    f"world size {w}, {call.describe()}: {CRASHED} ({died}):\n{failure_text(exc)}"
                )
                return False
            bug = known_bugs.recognise(f"check-pg:{op}", example, exc)
            if bug is not None:
                self.sightings.setdefault(op, []).append((bug, example, exc))
                return False
            result = self._probe_failure(exc)
            if isinstance(result, str):  # a failure of this form only: the plain form is still fuzzed
                self.form_failures.setdefault(op, []).append(f"world size {w}, {call.describe()}: {result}")
            else:
                self._refuse(
                    op,
                    variant,
                    None,
                    unsupported_reason(result[0], result[1], OPS[op].method)
                    or f"{result[0].rsplit('.', 1)[-1]}: {(result[1].strip().splitlines() or [''])[0]}",
                    w,
                )
            return False
        crashed = [
            f"rank {r}: {res[0][1]}"
            for r, res in enumerate(per_rank)
            if res[0] is not None and res[0][0] == _rank.SUBJECT_DIED
        ]
        if crashed:
            self.form_failures.setdefault(op, []).append(
                f"world size {w}, {call.describe()}: {CRASHED}:\n" + "\n".join(crashed)
            )
            return False
        raised = [r[0] for r in per_rank if r[0] is not None]
        if raised:
            type_name, message = raised[0]
            error = ConformanceFailure(
                f"{call.describe()} raised on the ranks: {type_name}: {message}",
                [Problem(Kind.RAISED, error=type_name, error_text=message)],
            )
            bug = known_bugs.recognise(f"check-pg:{op}", example, error)
            if bug is not None:
                self.sightings.setdefault(op, []).append((bug, example, error))
                return False
            self._refuse(
                op,
                variant,
                None,
                unsupported_reason(type_name, message, OPS[op].method)
                or f"{type_name.rsplit('.', 1)[-1]}: {(message.strip().splitlines() or [''])[0]}",
                w,
            )
            return False
        return True

    def example(self, w: int, **fields: Any) -> dict[str, Any]:
        """An example's fields for the report and the known-bug predicates (which look at the backend)."""
        return {"world_size": w, **fields, "backend": self._backends.get(w, "")}

    def reset(self, w: int, ref: str | None = None) -> None:
        """After an example failed on the ranks: a fresh group (``ref``'s, default the subject's) for
        the next one (see _rank.forget)."""
        try:
            self.pool(w).run(_rank.forget, ref or self.ref)
        except RankFailure:
            pass

    def inherited(
        self,
        w: int,
        check: str,
        example: dict[str, Any],
        failure: BaseException,
        calls: tuple[OpCall, ...],
        wait_order: tuple[int, ...] | None = None,
        observed: list[Any] | None = None,
    ) -> bool:
        """Whether ``failure`` of ``check`` is a known bug of the backend the group wraps, inherited:
        tallied as a sighting (True), or not (False: the caller reports the failure).

        Only with ``wraps`` set, only where one of that backend's known bugs explains the failure
        (the predicates look at the backend's name), and only where the backend itself, run on the
        same ranks as the reference, does the same: returns the very observations ``observed``
        (bit for bit), or fails on the calls in a way the same known bug explains."""
        tally = known_bugs.current_tally()
        if self.wraps is None or tally is None:
            return False
        bug = self._backends_bug(self.wraps, w, check, example, failure, calls, wait_order, observed)
        if bug is None:
            return False
        tally.add(bug, {**example, "inherited_from": self.wraps}, failure)
        self.inherited_bugs.setdefault(check, set()).add(bug.id)
        return True

    def resembles(
        self,
        w: int,
        check: str,
        example: dict[str, Any],
        failure: BaseException,
        calls: tuple[OpCall, ...],
        wait_order: tuple[int, ...] | None = None,
        observed: list[Any] | None = None,
    ) -> str:
        """Where the group is not said to wrap a backend: a line saying that ``failure`` of ``check`` is exactly
        what a known bug of a backend fuzzdist can run (gloo) gives, checked as :meth:`inherited` checks it,
        and to run again with ``--wraps`` if the group delegates to it; "" where none is (or where ``wraps``
        is set: :meth:`inherited` decided there)."""
        if self.wraps is not None:
            return ""
        for backend in WRAPPED_BACKENDS:
            bug = self._backends_bug(backend, w, check, example, failure, calls, wait_order, observed)
            if bug is not None:
                return (
                    f"this is exactly what {backend}'s known bug {bug.id!r} gives ({bug.summary}): if the group "
                    f"delegates to {backend}, run again with --wraps {backend} (CheckOptions(wraps={backend!r})), "
                    f"which reports {backend}'s own bugs as KNOWN"
                )
        return ""

    def _backends_bug(
        self,
        backend: str,
        w: int,
        check: str,
        example: dict[str, Any],
        failure: BaseException,
        calls: tuple[OpCall, ...],
        wait_order: tuple[int, ...] | None,
        observed: list[Any] | None,
    ) -> known_bugs.KnownBug | None:
        """The known bug of ``backend`` that ``failure`` is, where ``backend`` itself, run as the reference on
        the same ranks and calls, does the same (the same observations, bit for bit, or a failure the same
        bug explains); None otherwise."""
        as_backend = {**example, "backend": backend}
        bug = known_bugs.recognise(f"check-pg:{check}", as_backend, failure)
        if bug is None:
            return None
        reference = WRAPPED_BACKENDS[backend]
        try:
            theirs = self.pool(w).run(_rank.run_calls, reference, calls, wait_order)
        except RankFailure as exc:
            self.reset(w, reference)
            same = observed is None and known_bugs.recognise(f"check-pg:{check}", as_backend, exc) is bug
        else:
            same = observed is not None and theirs == observed
        return bug if same else None

    def _refuse(self, op: str, variant: str | None, dtype: str | None, reason: str, w: int) -> None:
        key = (op, variant, dtype)
        known = self._refused.get(key)
        if known is None:
            self._refused[key] = (reason, [w])
        elif w not in known[1]:
            known[1].append(w)

    def _run_probes(self, w: int, calls: list[OpCall], by_dtype: bool = False) -> list[Any]:
        """Per call: None (ran), (type, message) (raised), or a string (hung or crashed the ranks).

        One pool call for the whole batch; if that fails (a probe hung, or
        raised on some ranks only), per op, then one call per probe.
        """
        if not calls:
            return []
        pool = self.pool(w)
        try:
            per_rank = pool.run(
                _rank.probe, self.ref, tuple(calls), by_dtype, tuple(sorted(self.killer_dtypes)) if by_dtype else ()
            )
        except RankFailure as exc:
            died = self.deaths(w)
            if died:  # the group's own processes died: a fresh group for the probes still to run
                self.reset(w)
            if len(calls) == 1:
                if died:
                    return [f"{CRASHED} ({died}):\n{failure_text(exc)}"]
                return [self._probe_failure(exc)]
            ops = sorted({c.op for c in calls}, key=list(OPS).index)
            if len(ops) > 1:
                by_op: dict[Any, list[int]] = {op: [i for i, c in enumerate(calls) if c.op == op] for op in ops}
            else:
                by_op = {i: [i] for i in range(len(calls))}
            results: list[Any] = [None] * len(calls)
            for indices in by_op.values():
                for i, result in zip(indices, self._run_probes(w, [calls[i] for i in indices], by_dtype), strict=False):
                    results[i] = result
            return results
        merged: list[Any] = []
        for i, call in enumerate(calls):
            if (
                by_dtype
                and call.info.needs_dtypes
                and any(per_rank[r][i] is not None and per_rank[r][i][0] == _rank.SUBJECT_DIED for r in range(w))
            ):
                self.killer_dtypes.add(str(call.spec.dtype))  # not probed again at the other world sizes
            crashed = [
                f"rank {r}: {per_rank[r][i][1]}"
                for r in range(w)
                if per_rank[r][i] is not None and per_rank[r][i][0] == _rank.SUBJECT_DIED
            ]
            if crashed:  # a crash of the group under test, with its evidence: not a refusal
                merged.append(f"{CRASHED}:\n" + "\n".join(crashed))
                continue
            if any(per_rank[r][i] is not None and per_rank[r][i][0] == _rank.PROBE_SKIPPED for r in range(w)):
                merged.append(SKIPPED)
                continue
            raised = [per_rank[r][i] for r in range(w) if per_rank[r][i] is not None]
            refusals = [e for e in raised if unsupported_reason(e[0], e[1], call.info.method)]
            merged.append(refusals[0] if refusals else (raised[0] if raised else None))
        return merged

    def deaths(self, w: int) -> str:
        """After a failure: which of the group's own processes (those its factory started) have died,
        rank by rank ("" if none, or if the ranks themselves were restarted)."""
        try:
            per_rank = self.pool(w).run(_rank.dead_children, self.ref)
        except RankFailure:
            return ""
        return "; ".join(f"rank {r}: {line}" for r, lines in enumerate(per_rank) for line in lines)

    def _probe_failure(self, exc: RankFailure) -> Any:
        found = rank_exceptions(exc)
        for _, type_name, message in found:
            if unsupported_reason(type_name, message):
                return (type_name, message)
        if found:
            return (found[0][1], found[0][2])
        kind = (
            "hung" if isinstance(exc, RankTimeout) else "crashed the ranks" if isinstance(exc, RankCrash) else "failed"
        )
        return f"its probe {kind}:\n{failure_text(exc)}"

    # -- what the probes found, for an op's report ------------------------------------------

    def unsupported_for(self, op: str) -> list[Unsupported]:
        """What ``op`` refused, one entry per (reason, world sizes, dtypes), ReduceOps merged."""
        entries = [
            (variant, dtype, reason, tuple(sorted(ws)))
            for (o, variant, dtype), (reason, ws) in self._refused.items()
            if o == op
        ]
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

    def supported_for(self, op: str, sizes: list[int]) -> list[str]:
        """The variants of ``op`` fuzzed at ``sizes``: its dtypes per ReduceOp, and its layouts."""
        variants: dict[str | None, list[str]] = {}
        for w in sizes:
            for (o, reduce_op), dtypes in self.caps[w].dtypes.items():
                if o != op or not dtypes:
                    continue
                seen = variants.setdefault(reduce_op, [])
                seen.extend(dtype_name(d) for d in dtypes if dtype_name(d) not in seen)
        lines = [(f"ReduceOp.{r}: " if r else "") + ", ".join(d) for r, d in variants.items() if OPS[op].needs_dtypes]
        layouts = sorted(
            {lay for w in sizes for lay in self.caps[w].layouts.get(op, ())},
            key=("contiguous", "sliced", "transposed", "channels_last").index,
        )
        if OPS[op].layouts:
            lines.append("layouts: " + ", ".join(layouts))
        return lines
