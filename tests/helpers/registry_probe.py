"""Run by tests/known_bugs/test_known_bugs_registry.py in a fresh interpreter: read the registry of
``fuzzdist.known_bugs`` (which collects every family's entries by name), and recognise each property-suite entry's
symptom (and not another) on its family's own cases.  Prints one JSON line: the registry's ids, the property
modules imported, and per entry whether its symptom and a different one were recognised."""

from __future__ import annotations

import json
import sys

import torch

from fuzzdist import known_bugs
from fuzzdist.errors import PropertyFailure, RankError
from fuzzdist.problems import Kind, Problem, Symptom
from fuzzdist.properties import object_collectives, p2p, subgroups
from fuzzdist.strategies import TensorSpec


def _raised(message: str, where: str = '  File "subgroups.py", line 1, in _make_groups\n') -> RankError:
    return RankError([0], {0: where}, {0: "builtins.RuntimeError"}, {0: RuntimeError(message)})


def _failed(*problems: Problem) -> PropertyFailure:
    return PropertyFailure("wrong", [list(problems), None])


SPEC = TensorSpec((1,), torch.float32)
CLOSED = "Gloo connectFullMesh failed with [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1"
UNCLEAR = Problem.raised(
    RuntimeError("Pair is not connected"),
    "batch send to rank 0 (tag 0, spec, a self-loop)",
    symptom=Symptom.REFUSED_UNCLEARLY,
    subject=(0, 0),
)
UNPICKLE = Problem.raised(AttributeError("'UntypedStorage' has no attribute 'dtype'"), op="all_gather_object")
LOCAL_RANK = Problem(
    Kind.MISMATCH, "mesh dim 0 of (1, 0) (2,): get_local_rank(0)", got=0, expected=1, symptom=Symptom.MESH_SORTED_ORDER
)


def _subgroups(group: subgroups.Group, spec: TensorSpec = SPEC) -> subgroups.SubgroupCase:
    return subgroups.SubgroupCase((group,), (("all_reduce", "SUM"),), spec, 0)


# id -> (where, example, its symptom, another failure)
CASES = {
    "new-group-local-sync-recreate-fails": (
        "subgroups",
        {"case": _subgroups(subgroups.Group("new_group", (1, 0), (), True, True)), "local_sync_before": ((0, 1),)},
        _raised(CLOSED),
        _raised("invalid src"),
    ),
    "gloo-new-group-destroyed-early-breaks-peer": (
        "subgroups",
        {"case": _subgroups(subgroups.Group("new_group", (2, 0)), TensorSpec((0, 256), torch.float32))},
        _raised(CLOSED),
        _raised(CLOSED, where='  File "subgroups.py", line 1, in _run_op\n'),
    ),
    "device-mesh-local-rank-not-coordinate": (
        "subgroups",
        {"case": _subgroups(subgroups.Group("mesh", (1, 0), (2,)))},
        _failed(LOCAL_RANK),
        _failed(Problem(Kind.MISMATCH, LOCAL_RANK.what, got=0, expected=1)),
    ),
    "gloo-p2p-self-loop-unclear-error": (
        "p2p",
        {"case": p2p.P2PCase("batch", (p2p.Message(0, 0, 0, SPEC, 1),), ((), ()))},
        _failed(UNCLEAR),
        _failed(UNCLEAR.about(UNCLEAR.what, subject=(0, 3))),
    ),
    "wide-unsigned-unpickle-objects": (
        "object_collectives",
        {
            "case": object_collectives.ObjectCase(
                "all_gather_object", 0, (None, object_collectives.Tensor(TensorSpec((1,), torch.uint16), 0))
            )
        },
        _failed(UNPICKLE),
        _failed(Problem(Kind.MISMATCH, op="all_gather_object", detail="obj[0]: got 8")),
    ),
}


def main() -> None:
    seen = {}
    for bug_id, (where, example, symptom, other) in CASES.items():
        got, other_got = known_bugs.recognise(where, example, symptom), known_bugs.recognise(where, example, other)
        seen[bug_id] = [None if got is None else got.id, None if other_got is None else other_got.id]
    properties = sorted(m for m in sys.modules if m.startswith("fuzzdist.properties"))
    print(json.dumps({"ids": sorted(known_bugs.registry()), "properties": properties, "seen": seen}))


if __name__ == "__main__":
    main()
