"""The known torch bugs the pipelining property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import every_problem, example_of, raised_saying, shows
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom
from fuzzdist.properties.pipelining import PipeConfig

_STAGE_BACKWARD_FAILED = "Failed to run stage backward"


def _is_pipelining_static_args_no_grad(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Static stages built from plain example tensors (``config.plain_examples``), and either every problem
    is a stage gradient the check found equal to backward from that stage's own output with a gradient of
    ones, or every rank that raised raised the stage backward's RuntimeError with no output gradient."""
    config = example_of(example, "config", PipeConfig)
    if config is None or not (config.static and config.plain_examples):
        return False
    errors = evidence.raised(failure)
    if errors:
        return all(raised_saying(p, RuntimeError, _STAGE_BACKWARD_FAILED, "Output gradient: ('None',)") for p in errors)
    return every_problem(failure, shows(Symptom.IMPLICIT_ONES))


register(
    KnownBug(id="pipelining-static-args-no-grad", where=("pipelining",), recognise=_is_pipelining_static_args_no_grad)
)
