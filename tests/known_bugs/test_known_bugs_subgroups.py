"""The subgroups property's predicate for ``new-group-local-sync-recreate-fails``, on hand-made failures: it
knows the symptoms of a stale rendezvous only where a locally synchronised group is made again over ranks
an earlier example's (destroyed) one had."""

from __future__ import annotations

import pytest
import torch

from fuzzdist import known_bugs
from fuzzdist.errors import PropertyFailure, RankError, RankFailure, RankTimeout
from fuzzdist.properties import subgroups
from fuzzdist.properties.subgroups import known_bugs as subgroup_bugs
from fuzzdist.strategies import TensorSpec

SPEC = TensorSpec((1,), torch.float32)


def _case(ranks=(1, 0), local_sync=True) -> subgroups.SubgroupCase:
    return subgroups.SubgroupCase(
        (subgroups.Group("new_group", ranks, (), True, local_sync),), (("all_reduce", "SUM"),), SPEC, 0
    )


def _raised(*messages: str, stragglers: dict[int, str] | None = None) -> RankError:
    """Ranks 0, 1, ... raised RuntimeErrors with ``messages``; ``stragglers``: rank -> its stack."""
    excs = {r: RuntimeError(m) for r, m in enumerate(messages)}
    return RankError(
        list(excs),
        {r: "Traceback ..." for r in excs},
        dict.fromkeys(excs, "builtins.RuntimeError"),
        excs,
        stragglers=list(stragglers or ()),
        straggler_stacks=stragglers,
    )


CONNECT = "Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"
RESET = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer"
RECV_TIMEOUT = (
    "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 2000ms for recv "
    "operation to complete"
)
IN_NEW_GROUP = (
    '  File "distributed_c10d.py", line 1, in _new_process_group_helper\n'
    "    backend_class = ProcessGroupGloo(backend_prefix_store, ...)"
)
STALE = {
    "connect": _raised(CONNECT),
    "reset": _raised(RESET, stragglers={1: '  File "subgroups.py", line 1, in _run_op\n    fns["all_reduce"](...)'}),
    "recv timeout": _raised(RECV_TIMEOUT, RESET),
    # seen through RankPool: one rank's connect refused, the other's first read reset
    "read error": _raised(
        "Gloo connectFullMesh failed with [../gloo/transport/tcp/pair.cc:152] timed out connecting: "
        "SO_ERROR: Connection refused, remote=[127.0.0.1]:18856",
        "[../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:21934: Connection reset by peer",
    ),
    "hang": RankTimeout([0], 5.0, {0: IN_NEW_GROUP}),
}
# The same inputs, other symptoms: not the bug (every failing rank must show a stale rendezvous's symptom).
NOT_STALE = {
    "another error": _raised("invalid src"),
    "another error on one rank": _raised(RESET, "Invalid scalar type"),
    "a read error that is not gloo's": _raised("Read error [127.0.0.1]:21934: Connection reset by peer"),
    "a timeout that is not gloo's": _raised("Timed out waiting for the store key"),
    "a straggler elsewhere": _raised(CONNECT, stragglers={1: '  File "mine.py", line 3, in helper\n    time.sleep(9)'}),
    "a hang elsewhere": RankTimeout([0, 1], 5.0, {0: IN_NEW_GROUP, 1: '  File "x.py", line 2, in f\n    barrier()'}),
    "a wrong value": PropertyFailure("ranks [0] saw wrong subgroup results: {0: ['...']}", [["x"]]),
}


def _recognised(example, failure) -> bool:
    return known_bugs.recognise("subgroups", example, failure) is subgroup_bugs.LOCAL_SYNC_RECREATE


@pytest.mark.parametrize("symptom", sorted(STALE))
def test_a_stale_rendezvous_of_a_recreated_local_sync_group_is_the_known_bug(symptom):
    assert _recognised({"case": _case(), "local_sync_before": ((0, 1),)}, STALE[symptom])


@pytest.mark.parametrize("symptom", sorted(STALE))
def test_the_same_symptom_without_a_recreated_local_sync_group_is_not(symptom):
    failure = STALE[symptom]
    assert not _recognised({"case": _case()}, failure)  # the first such group over these ranks
    assert not _recognised({"case": _case(), "local_sync_before": ((0, 2),)}, failure)  # other ranks before
    assert not _recognised({"case": _case(local_sync=False), "local_sync_before": ((0, 1),)}, failure)


@pytest.mark.parametrize("symptom", sorted(NOT_STALE))
def test_other_failures_of_a_recreated_local_sync_group_are_not(symptom):
    assert not _recognised({"case": _case(), "local_sync_before": ((0, 1),)}, NOT_STALE[symptom])


class _FailingPool:
    """A pool whose ranks always fail as a stale rendezvous does."""

    world_size = 2

    def run(self, fn, *args, **kwargs):
        raise STALE["connect"]


def test_check_counts_only_a_group_made_again_in_the_same_pool():
    pool = _FailingPool()
    with known_bugs.collecting() as tally:
        with pytest.raises(RankFailure):  # the pool's first local-sync group over (0, 1): not the bug
            subgroups.check(pool, _case())
        subgroups.check(pool, _case())  # made again over the same ranks: the known bug, tallied
        with pytest.raises(RankFailure):
            subgroups.check(pool, _case(ranks=(0, 2)))
        with pytest.raises(RankFailure):
            subgroups.check(_FailingPool(), _case())  # another pool has no history
    assert list(tally.sightings) == ["new-group-local-sync-recreate-fails"] and tally.total == 1
