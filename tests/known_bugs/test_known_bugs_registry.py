"""Every built-in known bug is registered by importing ``fuzzdist.known_bugs`` alone (no property module),
and the entries the property suite's predicates need still tell their symptom from another; the subgroups
entry ``gloo-new-group-destroyed-early-breaks-peer`` on hand-made failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fuzzdist import known_bugs
from fuzzdist.errors import PropertyFailure, RankError
from fuzzdist.known_bugs.entries import ENTRY_MODULES
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties import subgroups
from fuzzdist.strategies import TensorSpec

ROOT = Path(__file__).resolve().parents[2]
BUILT_IN = {
    "gloo-broadcast-ignores-strides",
    "gloo-scatter-ignores-strides",
    "nn-all-gather-grad-transposed",
    "nn-all-reduce-backward-non-sum",
    "gloo-bool-sum-stores-2",
    "gloo-p2p-second-wait-blocks",
    "gloo-reduce-scatter-stack-aborts",
    "gloo-functional-all-to-all-complex-raises",
    # the property suite's own, once registered only when their property module was imported
    "wide-unsigned-unpickle-objects",
    "gloo-p2p-self-loop-unclear-error",
    "new-group-local-sync-recreate-fails",
    "device-mesh-local-rank-not-coordinate",
    "gloo-new-group-destroyed-early-breaks-peer",
    "nn-reduce-backward-ignores-op",
}
PROBE = Path(__file__).resolve().parents[1] / "helpers" / "registry_probe.py"


def test_importing_known_bugs_alone_registers_every_built_in_entry():
    """In a fresh interpreter that imports ``fuzzdist.known_bugs`` alone: every entry is listed (the registry
    collects each family's entries by name), and each of the property suite's entries recognises its symptom,
    and not another failure."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(PROBE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    probe = json.loads(out.strip().splitlines()[-1])
    # the families the registry collected, and nothing else of the property suite's
    assert set(probe["properties"]) <= {name.rpartition(".")[0] for name in ENTRY_MODULES} | set(ENTRY_MODULES) | {
        "fuzzdist.properties",
        "fuzzdist.properties._results",  # the checks' shared failure of the ranks' problems
        "fuzzdist.properties.ddp",
        "fuzzdist.properties.dtensor",
    }
    assert BUILT_IN - set(probe["ids"]) == set()
    assert probe["seen"] == {bug_id: [bug_id, None] for bug_id in probe["seen"]} and len(probe["seen"]) == 5


def test_the_families_known_bugs_modules_name_their_registry_entries():
    from fuzzdist.properties.object_collectives import known_bugs as object_bugs
    from fuzzdist.properties.p2p import known_bugs as p2p_bugs
    from fuzzdist.properties.subgroups import known_bugs as subgroup_bugs

    bugs = known_bugs.registry()
    assert subgroup_bugs.LOCAL_SYNC_RECREATE is bugs["new-group-local-sync-recreate-fails"]
    assert subgroup_bugs.MESH_LOCAL_RANK is bugs["device-mesh-local-rank-not-coordinate"]
    assert subgroup_bugs.DESTROYED_EARLY is bugs["gloo-new-group-destroyed-early-breaks-peer"]
    assert p2p_bugs.GLOO_P2P_SELF_LOOP_UNCLEAR is bugs["gloo-p2p-self-loop-unclear-error"]
    assert object_bugs.WIDE_UNSIGNED_UNPICKLE is bugs["wide-unsigned-unpickle-objects"]


def test_the_hooks_the_moved_predicates_read():
    from fuzzdist.properties import object_collectives as oc

    assert subgroups.Group("mesh", (1, 0), (2,)).unsorted_dims() == ["mesh dim 0"]
    assert subgroups.Group("mesh", (0, 1, 2, 3), (2, 2)).unsorted_dims() == []
    assert subgroups.Group("mesh", (2, 3, 1, 0), (2, 2)).unsorted_dims() == ["mesh dim 0", "mesh dim 1"]
    assert subgroups.Group("new_group", (1, 0)).unsorted_dims() == []
    wide = oc.Tensor(TensorSpec((1,), torch.uint16), 0)
    case = oc.ObjectCase("scatter_object_list", 0, ([None, {"x": [wide]}], None))
    assert case.dtypes_received(1, 2) == {"uint16"} and case.dtypes_received(0, 2) == set()


# -- gloo-new-group-destroyed-early-breaks-peer ------------------------------------------------------

EMPTY = TensorSpec((0, 256), torch.float32)
CLOSED = (
    "Gloo connectFullMesh failed with [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
    "Connection closed by peer [127.0.0.1]:6819. This is typically caused by a remote worker crashing."
)
MAKING = (
    '  File "fuzzdist/properties/subgroups.py", line 181, in subgroups_and_check\n'
    '  File "fuzzdist/properties/subgroups.py", line 162, in _make_groups\n    pg = new_group(...)\n'
    '  File "torch/distributed/distributed_c10d.py", line 2169, in _new_process_group_helper\n'
)
IN_OP = '  File "fuzzdist/properties/subgroups.py", line 230, in _run_op\n    fns["all_gather"](...)\n'


def _case(spec: TensorSpec = EMPTY) -> dict:
    return {
        "case": subgroups.SubgroupCase(
            (subgroups.Group("new_group", (2, 0)),), (("all_gather", 0), ("all_gather", 0)), spec, 66825555
        )
    }


def _raised(messages: dict[int, str], where: str = MAKING, stragglers: dict[int, str] | None = None) -> RankError:
    excs = {r: RuntimeError(m) for r, m in messages.items()}
    return RankError(
        list(excs),
        {r: f"Traceback (most recent call last):\n{where}" for r in excs},
        dict.fromkeys(excs, "builtins.RuntimeError"),
        excs,
        stragglers=list(stragglers or ()),
        straggler_stacks=stragglers,
    )


def _recognised(example: dict, failure: BaseException) -> str | None:
    bug = known_bugs.recognise("subgroups", example, failure)
    return None if bug is None else bug.id


def test_a_peer_closing_a_group_of_an_example_that_moves_no_data_is_the_known_bug():
    # the campaign's failure: rank 2's new_group([2, 0]) failed, ranks 0 and 1 had finished
    assert _recognised(_case(), _raised({2: CLOSED})) == "gloo-new-group-destroyed-early-breaks-peer"
    reset = CLOSED.replace("closed", "reset")
    waiting = {1: MAKING}  # left waiting in a later group's rendezvous for the failed rank
    assert (
        _recognised(_case(TensorSpec((4, 7, 0, 1), torch.float32)), _raised({2: reset}, stragglers=waiting))
        == "gloo-new-group-destroyed-early-breaks-peer"
    )


@pytest.mark.parametrize(
    "example, failure",
    [
        (_case(TensorSpec((1,), torch.float32)), _raised({2: CLOSED})),  # data moves: a peer can't have finished
        (_case(), _raised({2: CLOSED}, where=IN_OP)),  # raised in a collective, not while making the groups
        (_case(), _raised({2: CLOSED, 0: "invalid src"})),  # another error beside it
        (_case(), _raised({2: "Gloo connectFullMesh failed with [pair.cc:144] no error"})),  # not a closed peer
        (_case(), _raised({2: CLOSED}, stragglers={1: IN_OP})),  # a rank left waiting in a collective
        (
            _case(),
            PropertyFailure(
                "ranks [0] saw wrong subgroup results",
                [[Problem(Kind.MISMATCH, "all_gather", detail="differs")], None, None],
            ),
        ),
    ],
    ids=["data-moves", "in-a-collective", "another-error", "another-connect-error", "straggler-in-op", "wrong-value"],
)
def test_other_failures_are_not_the_destroyed_early_bug(example, failure):
    assert _recognised(example, failure) is None
