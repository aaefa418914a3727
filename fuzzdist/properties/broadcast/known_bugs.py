"""The known torch bugs the broadcast property runs into.

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


def _broadcast_ignores_strides(example: Mapping[str, Any], failure: BaseException) -> bool:
    return example["spec"].layout in DENSE_NON_CONTIGUOUS and every_problem(failure, shows(Symptom.MEMORY_ORDER))


register(KnownBug(id="gloo-broadcast-ignores-strides", where=("broadcast",), recognise=_broadcast_ignores_strides))
