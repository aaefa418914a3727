"""The known torch bugs the compile family runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by name).
A predicate matches the example's types and fields and the failure's :class:`~fuzzdist.problems.Problem`
records, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.distributed as dist

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import every_rank_raised, example_of
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Kind
from fuzzdist.properties.compile.ddp import CompiledDDPCase

MIB = 1024 * 1024

# -- DDP under compile: DDPOptimizer's first bucket ---------------------------------------------------

_FIRST_BUCKET_ASSERTION = "First bucket should be smaller/equal to other buckets"


def _under_the_first_bucket(case: CompiledDDPCase) -> bool:
    """Whether the case's DDP bucket cap is under DDP's default first bucket (1 MiB), the cap DDPOptimizer
    assumes for the first bucket whatever DDP was given."""
    cap = case.config.bucket_cap_mb
    return cap is not None and int(cap * MIB) < dist._DEFAULT_FIRST_BUCKET_BYTES


def _is_ddp_compile_sub_mib_bucket_cap_assert(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A compiled DDP case split by DDPOptimizer (not compiled autograd, which runs Dynamo's Python reducer
    instead) whose ``bucket_cap_mb`` is under 1 MiB, and every rank that raised raised DDPOptimizer's
    first-bucket AssertionError."""
    case = example_of(example, "case", CompiledDDPCase)
    if case is None or case.compiled_autograd or not _under_the_first_bucket(case):
        return False
    return every_rank_raised(failure, AssertionError, _FIRST_BUCKET_ASSERTION)


register(
    KnownBug(
        id="ddp-compile-sub-mib-bucket-cap-asserts",
        where=("compile",),
        recognise=_is_ddp_compile_sub_mib_bucket_cap_assert,
    )
)


# -- DDP under compiled autograd: the Python reducer's buffers ----------------------------------------


def _is_ddp_python_reducer_buffers_not_synced(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A compiled DDP case under compiled autograd (so Dynamo's Python reducer) whose model has buffers that feed
    its output, synced by DDP (``broadcast_buffers``), trained for more than one step (the first forward runs
    on the buffers every rank built alike), and the property reported only value mismatches."""
    case = example_of(example, "case", CompiledDDPCase)
    if case is None or not case.compiled_autograd:
        return False
    config = case.config
    if not (config.buffers and config.broadcast_buffers and config.steps > 1):
        return False
    problems = evidence.reported(failure) or []
    return bool(problems) and all(p.kind is Kind.MISMATCH for p in problems)


register(
    KnownBug(
        id="ddp-python-reducer-skips-buffer-broadcast",
        where=("compile",),
        recognise=_is_ddp_python_reducer_buffers_not_synced,
    )
)
