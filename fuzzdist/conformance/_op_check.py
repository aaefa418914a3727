"""The check of one operation of ``OPS``: fuzz its calls at every world size the probes found it
implemented at, one run per ReduceOp for a reducing op, each call's result checked by its ``OpInfo``."""

from __future__ import annotations

import functools

from hypothesis import strategies as st

from fuzzdist import known_bugs
from fuzzdist.conformance import _rank
from fuzzdist.conformance._fuzzing import Fuzzer, finish
from fuzzdist.conformance._probe import GroupProbe
from fuzzdist.conformance._report import Failure, OpReport, raised_message, with_hint
from fuzzdist.conformance.ops import OPS, REDUCE_OPS, Capabilities, OpCall, OpInfo
from fuzzdist.errors import ConformanceFailure, RankFailure


def run_op(probe: GroupProbe, fuzzer: Fuzzer, op: str, report: OpReport) -> None:
    """Fuzz the operation ``op`` into ``report``."""
    info = OPS[op]
    caps_by_size = probe.caps
    max_bytes = fuzzer.options.max_bytes
    report.unsupported = probe.unsupported_for(op)
    hung = [f"world size {w}: {caps.hung[op]}" for w, caps in caps_by_size.items() if op in caps.hung]
    if hung:
        report.status = "failed"
        report.failure = Failure(
            op,
            f"{op} ({info.method}) failed when probed with a 2-element tensor (it hung, "
            "or crashed the ranks or the group's own processes):\n" + "\n".join(hung),
            {"probe": True},
        )
        _report_form_failures(probe, op, report)
        return
    sizes = [w for w, caps in sorted(caps_by_size.items()) if caps.available(op)]
    if not sizes:
        built = list(caps_by_size)
        if built and all(w < info.min_world for w in built):
            report.status = "not applicable"
            report.note = f"needs {info.min_world} or more ranks"
        elif built:
            report.status = "unsupported"
        else:
            report.note = "the factory did not build a group"
        _report_form_failures(probe, op, report)  # a probe that crashed the group is a failure all the same
        return
    report.supported = probe.supported_for(op, sizes)

    def execute(w: int, call: OpCall, failing: list[Failure]) -> None:
        head = (
            f"{op} does not conform: {call.describe()} with world_size={w} "
            f"(ProcessGroup.{info.method}, called as torch.distributed.{info.mirrors} calls it)"
        )
        example = probe.example(w, call=call)
        try:
            observed = probe.pool(w).run(_rank.run_calls, probe.ref, (call,))
        except RankFailure as exc:
            died = probe.deaths(w)
            probe.reset(w)
            if known_bugs.sighted(f"check-pg:{op}", example, exc) or probe.inherited(w, op, example, exc, (call,)):
                return
            message = raised_message(head, exc)
            if died:
                message = f"{message}\n  the group's own processes died during the call: {died}"
            hint = probe.resembles(w, op, example, exc, (call,))
            failing.append(Failure(op, with_hint(message, hint), example, exc))
            raise
        problems = info.check(call, w, [obs[0] for obs in observed])
        if problems:
            message = head + "\n" + "\n".join(f"  {p}" for p in problems) + "\n" + info.inputs_summary(call, w)
            failure = ConformanceFailure(message, problems)
            if known_bugs.sighted(f"check-pg:{op}", example, failure) or probe.inherited(
                w, op, example, failure, (call,), observed=observed
            ):
                return
            hint = probe.resembles(w, op, example, failure, (call,), observed=observed)
            failing.append(Failure(op, with_hint(message.rstrip(), hint), example, failure))
            raise failure

    if not info.reduces:
        fuzzer.fuzz(op, sizes, lambda w: info.calls(caps_by_size[w], max_bytes), execute, report)
    else:
        # One run per reduce op, each with the full example budget: backends implement them
        # separately, and a single run would give each only a fraction of its examples.
        reduce_ops = [r for r in REDUCE_OPS if any(r in caps_by_size[w].reduce_ops(op) for w in sizes)]
        for i, reduce_op in enumerate(reduce_ops):
            if report.failure is not None:
                break
            op_sizes = [w for w in sizes if reduce_op in caps_by_size[w].reduce_ops(op)]
            fuzzer.fuzz(
                op,
                op_sizes,
                functools.partial(_op_calls, caps_by_size, max_bytes, info, reduce_op=reduce_op),
                execute,
                report,
                variant=reduce_op,
                parts_left=len(reduce_ops) - i,
            )
    _report_form_failures(probe, op, report)
    finish(report)


def _op_calls(
    caps: dict[int, Capabilities], max_bytes: int, info: OpInfo, w: int, *, reduce_op: str | None = None
) -> st.SearchStrategy:
    """The calls of ``info`` drawn at world size ``w`` (``reduce_op`` fixed, if given)."""
    return info.calls(caps[w], max_bytes, reduce_op=reduce_op)


def _report_form_failures(probe: GroupProbe, op: str, report: OpReport) -> None:
    """An argument form whose probe hung or crashed is a failure of ``op`` (that form only: the
    plain form was fuzzed all the same); a failure the fuzzing found keeps the report's failure
    slot, and the form's is named in the note."""
    failed = probe.form_failures.get(op)
    if not failed:
        return
    message = (
        f"{op} ({OPS[op].method}) hung, crashed the ranks or crashed the group's own processes when "
        "probed in another dtype or argument form (the plain form was fuzzed all the same, in what it "
        "accepted):\n" + "\n".join(failed)
    )
    if report.failure is None:
        report.status = "failed"
        report.failure = Failure(op, message, {"probe": True})
    else:
        also = f"also: {message.splitlines()[0]} ({len(failed)} probe(s))"
        report.note = f"{report.note}; {also}" if report.note else also
