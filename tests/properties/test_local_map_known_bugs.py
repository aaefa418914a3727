"""The local_map family's known bug's predicate, on recorded failures (no ranks started): a failure whose
every problem is a result shape computed as if the shards were even, of ``local_map`` with a sharded
``in_placements``, is ``local-map-uneven-shard-output-wrong-shape``; its near misses are not."""

from __future__ import annotations

import pytest

from fuzzdist import known_bugs
from fuzzdist.problems import Kind, Problem, Symptom
from fuzzdist.properties import PropertyFailure, local_map

BUG = "local-map-uneven-shard-output-wrong-shape"
UNEVEN = local_map.LocalMapCase((1,), "double", "S0", "S0")


def _shape(rank: int, got: tuple[int, ...], symptom: Symptom | None = Symptom.EVEN_SHARDS_ASSUMED) -> Problem:
    return Problem(Kind.SHAPE, "the result's shape", rank=rank, got=got, expected=(1,), symptom=symptom)


def _failure(*problems: Problem) -> PropertyFailure:
    return PropertyFailure("recorded", [[p] for p in problems], list(problems))


def _recognised(case: local_map.LocalMapCase, failure: BaseException) -> str | None:
    bug = known_bugs.recognise("local_map", {"case": case}, failure)
    return None if bug is None else bug.id


def test_shapes_computed_as_if_even_are_the_known_bug():
    assert _recognised(UNEVEN, _failure(_shape(0, (2,)), _shape(1, (0,)))) == BUG


@pytest.mark.parametrize(
    ("case", "failure"),
    [
        # a wrong shape that is not the even-shards one: another bug
        (UNEVEN, _failure(_shape(0, (3,), symptom=None), _shape(1, (0,)))),
        # one rank's values wrong besides: not only the shape
        (UNEVEN, _failure(_shape(0, (2,)), Problem(Kind.MISMATCH, "output", rank=1, got=1.0, expected=2.0))),
        # the custom op runs no local_map
        (local_map.LocalMapCase((1,), "custom_op", "S0", "S0"), _failure(_shape(0, (2,)), _shape(1, (0,)))),
        # wanted replicated: local_map's output is not sharded
        (local_map.LocalMapCase((1,), "double", "S0", "R", True), _failure(_shape(0, (2,)), _shape(1, (0,)))),
        # a rank that raised, not a shape
        (UNEVEN, RuntimeError("not a property's failure")),
    ],
)
def test_near_misses_are_not_the_known_bug(case, failure):
    assert _recognised(case, failure) is None
