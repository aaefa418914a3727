"""The known torch bugs the ``torch.distributed.nn`` collectives property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs.predicates import DENSE_NON_CONTIGUOUS, every_problem, shows
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom


def _collective(name: str, example: Mapping[str, Any]) -> bool:
    return bool(example.get("name") == name)


def _all_to_all_scatter_ignores_strides(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (
        _collective("all_to_all", example)
        and example["case"].out_layout in DENSE_NON_CONTIGUOUS
        and every_problem(failure, shows(Symptom.STRIDES_IGNORED))
    )


register(
    KnownBug(id="gloo-scatter-ignores-strides", where=("collectives",), recognise=_all_to_all_scatter_ignores_strides)
)


def _all_gather_grad_transposed(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (
        _collective("all_gather", example)
        and example["case"].grad_layout in DENSE_NON_CONTIGUOUS
        and every_problem(failure, shows(Symptom.STRIDES_IGNORED))
    )


register(KnownBug(id="nn-all-gather-grad-transposed", where=("collectives",), recognise=_all_gather_grad_transposed))


def _all_reduce_backward_non_sum(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (
        _collective("all_reduce", example)
        and example["case"].op in ("PRODUCT", "MIN", "MAX")
        and every_problem(failure, shows(Symptom.FORWARD_OP_ON_GRADS))
    )


register(KnownBug(id="nn-all-reduce-backward-non-sum", where=("collectives",), recognise=_all_reduce_backward_non_sum))


def _reduce_backward_ignores_op(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (
        example.get("name") in ("reduce", "reduce_scatter")
        and example["case"].op in ("AVG", "PRODUCT", "MIN", "MAX")
        and every_problem(failure, shows(Symptom.SUM_GRAD_FOR_ANY_OP))
    )


register(KnownBug(id="nn-reduce-backward-ignores-op", where=("collectives",), recognise=_reduce_backward_ignores_op))
