"""The known torch bugs the DDP communication-hook properties run into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.errors import RankTimeout
from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import every_rank_raised, example_of, raised_saying
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom
from fuzzdist.properties.comm_hooks import PowerSGDCase
from fuzzdist.strategies import DDPConfig


def _is_batched_powersgd_orthogonalize_assert(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The ranks raised the bare AssertionError of ``_orthogonalize``'s shape check, called from
    ``batched_powerSGD_hook``."""
    errors = evidence.raised(failure)
    return any(raised_saying(p, AssertionError, "batched_powerSGD_hook", "_orthogonalize") for p in errors)


# docs/findings/batched-powersgd-orthogonalize-asserts.py, seen by properties/test_comm_hooks.py::test_powersgd
register(
    KnownBug(
        id="batched-powersgd-orthogonalize-asserts",
        where=("comm_hooks",),
        recognise=_is_batched_powersgd_orthogonalize_assert,
    )
)


# -- DDP: static_graph with no_sync ------------------------------------------------------------------

_EXPECT_AUTOGRAD_HOOKS = "expect_autograd_hooks_ INTERNAL ASSERT FAILED"


def _is_ddp_static_graph_no_sync_assert(example: Mapping[str, Any], failure: BaseException) -> bool:
    """The no_sync check (its example has a ``config``) on a ``static_graph`` DDP config, and every rank
    that raised raised the reducer's ``expect_autograd_hooks_`` internal assertion."""
    config = example_of(example, "config", DDPConfig)
    if config is None or not config.static_graph:
        return False
    return every_rank_raised(failure, RuntimeError, _EXPECT_AUTOGRAD_HOOKS)


register(
    KnownBug(
        id="ddp-static-graph-no-sync-asserts", where=("comm_hooks",), recognise=_is_ddp_static_graph_no_sync_assert
    )
)


# -- DDP communication hooks: PowerSGD's collectives from future callbacks ----------------------------


_HOOK_FILE = "powerSGD_hook.py"
_GLOO_SIZE_MISMATCH = "Received data size doesn't match expected size"
# the enforce itself, which torch 2.6.0's gloo states without the sentence above ("... 40 vs 8")
_GLOO_SIZE_ENFORCE = "op.preamble.length <= op.nbytes"


def _is_powersgd_callback_collectives_hang(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A PowerSGD case whose model spans more than one bucket (a bucket cap drawn, or an unused layer that
    brings find_unused_parameters), and the symptom of the ranks' collectives out of step: the ranks hung
    with a rank inside one of powerSGD_hook's future callbacks (its all-reduces of P or Q); or a rank died
    on gloo's "Received data size doesn't match expected size" inside such a callback, or raised a gloo
    error through one (a recv timed out: "Got the following error when running the callback"); or the synced
    gradients differ across the ranks bitwise (every rank gets the same all-reduce result unless the
    ranks paired different all-reduces: a deterministic bug in the hook would not make them differ)."""
    case = example.get("case")
    if not isinstance(case, PowerSGDCase):  # the PowerSGD check only
        return False
    config = getattr(case, "config", None)
    if config is None or not (
        getattr(config, "bucket_cap_mb", None) is not None or getattr(config, "find_unused_parameters", False)
    ):
        return False
    if isinstance(failure, RankTimeout):
        return any(evidence.says(p, _HOOK_FILE) for p in evidence.waiting(failure))
    died = evidence.died(failure)
    if died:  # a rank aborted on gloo's size check, inside a callback
        return any(evidence.says(p, _GLOO_SIZE_MISMATCH) or evidence.says(p, _GLOO_SIZE_ENFORCE) for p in died) and any(
            evidence.says(p, _HOOK_FILE) for p in died
        )
    errors = evidence.raised(failure)
    if errors:  # a gloo error raised through one of the hook's callbacks
        return all(evidence.says(p, "when running the callback") and evidence.says(p, _HOOK_FILE) for p in errors)
    return any(p.symptom is Symptom.RANKS_DIFFER for p in evidence.reported(failure) or [])


register(
    KnownBug(
        id="powersgd-multiple-buckets-hangs", where=("comm_hooks",), recognise=_is_powersgd_callback_collectives_hang
    )
)
