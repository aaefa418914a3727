"""The composite checks, over every operation the group implements: ``async`` (several calls in
flight, waited in a drawn order) and ``ddp_parity`` (the property suite's DDP parity property, run
over the group, directly and through a ``ReorderingProcessGroup``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from hypothesis import strategies as st

from fuzzdist import known_bugs
from fuzzdist import strategies as fst
from fuzzdist.conformance import _rank
from fuzzdist.conformance._checks import ASYNC, DDP
from fuzzdist.conformance._draw import programs, wait_sequence
from fuzzdist.conformance._fuzzing import Fuzzer, _Refused, finish
from fuzzdist.conformance._probe import GroupProbe
from fuzzdist.conformance._report import (
    Failure,
    OpReport,
    failure_text,
    raised_message,
    rank_exceptions,
    unsupported_reason,
    with_hint,
)
from fuzzdist.conformance.ops import OPS
from fuzzdist.errors import ConformanceFailure, RankFailure
from fuzzdist.problems import Problem
from fuzzdist.properties import ddp as ddp_property


def run_async(probe: GroupProbe, fuzzer: Fuzzer, report: OpReport) -> None:
    """The ``async`` check into ``report``: 2 to 4 calls of the supported operations issued with
    ``async_op=True`` before any is waited, then waited in a drawn order."""
    options = fuzzer.options
    sizes = []
    for w, caps in sorted(probe.caps.items()):
        if [op for op in OPS if caps.available(op)]:
            sizes.append(w)
    if not sizes:
        report.status = "unsupported"
        report.note = "no operation is supported"
        return

    def draw(w: int) -> st.SearchStrategy:
        caps = probe.caps[w]
        return programs(
            caps,
            tuple(op for op in OPS if caps.available(op)),
            max(64, options.max_bytes // 4),
            repeat_waits=options.repeat_waits,
        )

    def execute(w: int, program: Any, failing: list[Failure]) -> None:
        calls, order = program
        waits = wait_sequence(order)
        head = (
            f"async: {len(calls)} calls issued with async_op=True before any wait, then waited in the "
            f"order {list(waits)} ({order!r}), with world_size={w}:\n"
            + "\n".join(f"  call {i}: {c.describe()}" for i, c in enumerate(calls))
        )
        example = probe.example(w, calls=calls, wait_order=waits, order=order)
        try:
            observed = probe.pool(w).run(_rank.run_calls, probe.ref, calls, waits)
        except RankFailure as exc:
            died = probe.deaths(w)
            probe.reset(w)
            if known_bugs.sighted(f"check-pg:{ASYNC}", example, exc) or probe.inherited(
                w, ASYNC, example, exc, calls, waits
            ):
                return
            message = raised_message(head, exc)
            if died:
                message = f"{message}\n  the group's own processes died during the calls: {died}"
            hint = probe.resembles(w, ASYNC, example, exc, calls, waits)
            failing.append(Failure(ASYNC, with_hint(message, hint), example, exc))
            raise
        by_call: dict[int, list[Problem]] = {}
        for i, call in enumerate(calls):
            for p in call.info.check(call, w, [obs[i] for obs in observed]):
                by_call.setdefault(i, []).append(dataclasses.replace(p, call=i, op=call.op))
        problems = [p for i in sorted(by_call) for p in by_call[i]]
        if problems:
            message = head + "\n" + "\n".join(f"  {p}" for p in problems)
            failure = ConformanceFailure(message, problems)
            if (
                known_bugs.sighted(f"check-pg:{ASYNC}", example, failure)
                or _each_call_a_known_bug(example, head, by_call)
                or probe.inherited(w, ASYNC, example, failure, calls, waits, observed=observed)
            ):
                return
            hint = probe.resembles(w, ASYNC, example, failure, calls, waits, observed=observed)
            failing.append(Failure(ASYNC, with_hint(message, hint), example, failure))
            raise failure

    report.supported = ["every supported operation, 2 to 4 in flight"]
    fuzzer.fuzz(ASYNC, sizes, draw, execute, report)
    finish(report)


def _each_call_a_known_bug(example: dict[str, Any], head: str, by_call: dict[int, list[Problem]]) -> bool:
    """Where the wrong results of several calls of one async example are different known bugs (torch 2.6.0's
    gloo: a reduce_scatter_tensor that sums whatever the op, and a bool SUM allreduce that stores the byte 2),
    no bug explains them all: each call's problems alone, if every call's are a known bug, are tallied as a
    sighting each (True); otherwise nothing is tallied (False), and the example is a failure."""
    if len(by_call) < 2:
        return False
    where = f"check-pg:{ASYNC}"
    failures = [
        ConformanceFailure(head + "\n" + "\n".join(f"  {p}" for p in problems), problems)
        for problems in by_call.values()
    ]
    if any(known_bugs.recognise(where, example, f) is None for f in failures):
        return False
    return all([known_bugs.sighted(where, example, f) for f in failures])


def run_ddp(probe: GroupProbe, fuzzer: Fuzzer, report: OpReport) -> None:
    """The ``ddp_parity`` check into ``report``: DDP over the group trains as a local model does."""
    sizes = sorted(probe.caps)
    if not sizes:
        report.note = "the factory did not build a group"
        return
    kinds = ["direct"]
    if fuzzer.options.ddp_reorder:
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
        fields = {
            "world_size": w,
            "config": config,
            "dtype": dtype,
            "seed": seed,
            "pg_kind": kind,
            "schedule": schedule,
        }
        try:
            results = probe.pool(w).run(_rank.ddp_parity, probe.ref, config, dtype, seed, kind, schedule)
        except RankFailure as exc:
            probe.reset(w)
            found = rank_exceptions(exc)
            reasons = [unsupported_reason(t, m) for _, t, m in found]
            if found and all(reasons) and kind == "direct":
                raise _Refused(f"DDP needs an operation the group does not implement: {reasons[0]}") from exc
            failing.append(Failure(DDP, f"{head}: raised\n{failure_text(exc)}", fields, exc))
            raise
        try:
            ddp_property.check_parity(results)
        except AssertionError as exc:
            failing.append(Failure(DDP, f"{head}:\n  {exc}", fields))
            raise ConformanceFailure(f"{head}: {exc}") from None

    report.supported = [f"DistributedDataParallel over it ({', '.join(kinds)})"]
    # Each example trains a model: a quarter of the profile's examples, unless asked otherwise.
    fuzzer.fuzz(DDP, sizes, draw, execute, report, share=4)
    finish(report)
