"""The known torch bugs the local_map property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs.predicates import every_problem, example_of, shows
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom
from fuzzdist.properties.local_map import LocalMapCase


def _is_uneven_output_shape(example: Mapping[str, Any], failure: BaseException) -> bool:
    """``local_map`` (not the custom op) run with a sharded ``in_placements``, and every rank's problem a
    result whose global shape is its own piece's as if every piece were as large (``from_local``'s shape
    without ``shape``): torch's, with uneven shards.  Which shards were uneven the symptom says: with even ones
    that shape is the right one."""
    case = example_of(example, "case", LocalMapCase)
    if case is None or case.function == "custom_op" or case.refused or case.wanted == "R":
        return False
    return every_problem(failure, shows(Symptom.EVEN_SHARDS_ASSUMED))


register(
    KnownBug(id="local-map-uneven-shard-output-wrong-shape", where=("local_map",), recognise=_is_uneven_output_shape)
)
