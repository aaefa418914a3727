"""The known torch bugs the ``torch.distributed.nn`` collectives property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs.predicates import DENSE_NON_CONTIGUOUS, SEEN_ON, every_problem, shows
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom


def _collective(name: str, example: Mapping[str, Any]) -> bool:
    return bool(example.get("name") == name)


def _all_to_all_scatter_ignores_strides(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (_collective("all_to_all", example) and example["case"].out_layout in DENSE_NON_CONTIGUOUS
            and every_problem(failure, shows(Symptom.STRIDES_IGNORED)))


register(KnownBug(
    id="gloo-scatter-ignores-strides", kind="wrong result",
    summary="gloo's scatter writes row-major bytes into the memory of a non-contiguous output tensor "
            "(torch.distributed.nn.all_to_all on gloo is built from scatters)",
    where=("collectives",), recognise=_all_to_all_scatter_ignores_strides, seen_on=SEEN_ON,
    upstream="https://github.com/pytorch/pytorch/issues/24836",
    reproducer="docs/findings/gloo-scatter-ignores-strides.py"))


def _all_gather_grad_transposed(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (_collective("all_gather", example) and example["case"].grad_layout in DENSE_NON_CONTIGUOUS
            and every_problem(failure, shows(Symptom.STRIDES_IGNORED)))


register(KnownBug(
    id="nn-all-gather-grad-transposed", kind="wrong result",
    summary="torch.distributed.nn.all_gather on gloo: a transposed (or channels_last) upstream gradient "
            "gives a wrong input gradient (its backward scatters into empty_like(grad), and gloo's "
            "scatter ignores strides)",
    where=("collectives",), recognise=_all_gather_grad_transposed, seen_on=SEEN_ON,
    reproducer="docs/findings/nn-all-gather-grad-transposed.py"))


def _all_reduce_backward_non_sum(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (_collective("all_reduce", example) and example["case"].op in ("PRODUCT", "MIN", "MAX")
            and every_problem(failure, shows(Symptom.FORWARD_OP_ON_GRADS)))


register(KnownBug(
    id="nn-all-reduce-backward-non-sum", kind="wrong result",
    summary="torch.distributed.nn.all_reduce's backward all-reduces the upstream gradients with the "
            "forward's op: wrong input gradients for PRODUCT, MIN and MAX",
    where=("collectives",), recognise=_all_reduce_backward_non_sum, seen_on=SEEN_ON,
    reproducer="docs/findings/nn-all-reduce-backward-non-sum.py"))


def _reduce_backward_ignores_op(example: Mapping[str, Any], failure: BaseException) -> bool:
    return (example.get("name") in ("reduce", "reduce_scatter")
            and example["case"].op in ("AVG", "PRODUCT", "MIN", "MAX")
            and every_problem(failure, shows(Symptom.SUM_GRAD_FOR_ANY_OP)))


register(KnownBug(
    id="nn-reduce-backward-ignores-op", kind="wrong result",
    summary="torch.distributed.nn.reduce's and reduce_scatter's backward ignore the forward's op (a broadcast, "
            "an all_gather of the upstream gradients): every input gradient is SUM's, wrong for AVG, "
            "PRODUCT, MIN and MAX",
    where=("collectives",), recognise=_reduce_backward_ignores_op, seen_on=SEEN_ON,
    reproducer="docs/findings/nn-reduce-backward-ignores-op.py"))
