"""The subgroup, point-to-point and object-collective properties can fail: with a planted bug, fuzzdist
catches it and shrinks it to a minimal example."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from helpers import planted_p2p as planted
from helpers.minimal import minimal_failure
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.errors import PropertyFailure
from fuzzdist.known_bugs import collecting
from fuzzdist.properties import object_collectives, p2p, subgroups


@pytest.mark.fuzzdist(world_size=3)
@pytest.mark.skipif(not subgroups.HAS_SORT_RANKS, reason="this torch's new_group has no sort_ranks")
def test_subgroups_catch_a_new_group_ignoring_sort_ranks(rank_pool):
    with collecting():
        f = minimal_failure(
            partial(subgroups.check, rank_pool, new_group=planted.new_group_always_sorted),
            case=subgroups.subgroup_cases(rank_pool.world_size, kinds=("new_group",)),
        )
    (group,) = f.case.groups
    # a group whose order shows: ranks not ascending, sort_ranks=False
    assert list(group.ranks) != sorted(group.ranks) and not group.sort_ranks
    assert len(f.case.ops) == 1 and f.case.ops[0][0] in ("broadcast", "all_gather")
    assert f.case.spec.numel == 1
    members = [r for r, result in enumerate(f.results) if result]
    assert members and set(members) <= set(group.ranks)


# One shape for every message: with tags ignored, messages of two sizes would be matched to each other
# and gloo would hang on the size mismatch (a known bug of its own), costing a timeout per example.
ONE_FLOAT = fst.tensor_specs(shapes=st.just((1,)), dtypes=st.just(torch.float32), layouts="contiguous")


@pytest.mark.fuzzdist(world_size=2)
def test_p2p_catches_tags_ignored(rank_pool):
    api = {"isend": planted.isend_ignoring_tag, "irecv": planted.irecv_ignoring_tag}
    with collecting():  # the known self-loop bug is tallied, not taken for the planted one
        f = minimal_failure(
            partial(p2p.check, rank_pool, api=api),
            case=p2p.p2p_cases(rank_pool.world_size, apis=st.just("isend"), specs=ONE_FLOAT),
        )
    # two messages between one pair, told apart only by their tags, posted in different orders
    assert len(f.case.messages) == 2
    a, b = f.case.messages
    assert (a.src, a.dst) == (b.src, b.dst) and a.tag != b.tag
    assert f.case.orders[a.src] != f.case.orders[a.dst]
    assert f.results[a.src] is None and "message #" in str(f.results[a.dst][0])


SELF_DELIVERING = {"isend": planted.isend_to_self, "irecv": planted.irecv_from_self}


def _self_loops_case() -> p2p.P2PCase:
    f32, i64 = fst.TensorSpec((3,), torch.float32), fst.TensorSpec((2, 2), torch.int64)
    messages = (
        p2p.Message(0, 0, 0, f32, 1),
        p2p.Message(0, 1, 0, i64, 2),
        p2p.Message(1, 1, 3, i64, 3),
        p2p.Message(0, 0, 5, i64, 4),
    )
    return p2p.P2PCase("isend", messages, ((1,), (1,)))


@pytest.mark.fuzzdist(world_size=2)
def test_p2p_passes_a_torch_that_delivers_self_loops(rank_pool):
    """torch documents isend/irecv to self as allowed: delivering them is right, not a known bug's sighting."""
    with collecting() as tally:
        p2p.check(rank_pool, _self_loops_case(), api=SELF_DELIVERING)
    assert not tally


@pytest.mark.fuzzdist(world_size=2)
def test_p2p_catches_a_self_loop_delivering_wrong_values(rank_pool):
    api = {**SELF_DELIVERING, "irecv": planted.irecv_from_self_flipping_a_bit}
    with collecting() as tally, pytest.raises(PropertyFailure, match="delivered wrong values"):
        p2p.check(rank_pool, _self_loops_case(), api=api)
    assert not tally  # wrong values are not the known bug's unclear refusal
    with collecting():
        f = minimal_failure(
            partial(p2p.check, rank_pool, api=api),
            case=p2p.p2p_cases(rank_pool.world_size, apis=st.just("isend"), specs=ONE_FLOAT),
        )
    (m,) = f.case.messages
    assert m.src == m.dst and m.tag == 0
    assert "delivered wrong values" in str(f.results[m.src][0]) and f.results[1 - m.src] is None


@pytest.mark.fuzzdist(world_size=2)
def test_p2p_catches_a_self_loop_receive_that_writes_nothing(rank_pool):
    """A message of constant False bools, the same for every seed: the receive buffer must not hold it already."""
    api = {**SELF_DELIVERING, "irecv": planted.irecv_from_self_writing_nothing}
    case = p2p.P2PCase(
        "isend", (p2p.Message(0, 0, 0, fst.TensorSpec((3,), torch.bool, pattern="constant"), 1),), ((), ())
    )
    with collecting() as tally, pytest.raises(PropertyFailure, match="delivered wrong values"):
        p2p.check(rank_pool, case, api=api)
    assert not tally


@given(spec=p2p.SPECS, seed=st.integers(0, 2**32 - 1))
@settings(max_examples=50, deadline=None)
def test_the_receive_buffer_differs_from_the_message_in_every_element(spec, seed):
    sent, buffer = spec.materialize("cpu", seed), p2p.decoy(spec, seed)
    assert buffer.shape == sent.shape and buffer.stride() == sent.stride() and buffer.dtype == sent.dtype
    size = sent.element_size()
    as_bytes = [t.contiguous().reshape(-1).view(torch.uint8).reshape(-1, size) for t in (sent, buffer)]
    assert bool((as_bytes[0] != as_bytes[1]).any(1).all())


@pytest.mark.fuzzdist(world_size=2)
def test_object_collectives_catch_ints_wrapped_to_64_bits(rank_pool):
    ops = {**object_collectives._default_ops(), "broadcast_object_list": planted.broadcast_object_list_int64}
    with collecting():  # the known wide-unsigned unpickling bug is tallied, not taken for the planted one
        f = minimal_failure(
            partial(object_collectives.check, rank_pool, ops=ops),
            case=object_collectives.object_cases(rank_pool.world_size, op=st.just("broadcast_object_list")),
        )
    # the smallest int 64 bits can't hold, alone
    assert f.case.objects[f.case.root] in ([2**63], [-(2**63) - 1])
    assert f.results[f.case.root] is None and f.results[1 - f.case.root]


@pytest.mark.fuzzdist(world_size=2)
def test_p2p_recycles_the_ranks_after_an_op_that_should_be_refused_was_accepted(rank_pool):
    """An accepted receive of a non-contiguous tensor is left pending (never waited on): the ranks are
    replaced, so it can't take the next example's message with the same peer and tag."""
    refused = p2p.Message(0, 1, 0, fst.TensorSpec((2, 2), torch.float32, "transposed"), 1)
    before = rank_pool.run(planted.pid)
    with collecting() as tally, pytest.raises(PropertyFailure, match="was accepted"):
        p2p.check(
            rank_pool, p2p.P2PCase("isend", (refused,), ((), ())), api={"irecv": planted.irecv_accepting_any_layout}
        )
    assert not tally
    after = rank_pool.run(planted.pid)
    assert not set(before) & set(after)
    same_pair_and_tag = p2p.Message(0, 1, 0, fst.TensorSpec((1,), torch.float32), 2)
    p2p.check(rank_pool, p2p.P2PCase("isend", (same_pair_and_tag,), ((0,), (0,))))


@pytest.mark.fuzzdist(world_size=2)
def test_p2p_keeps_the_ranks_when_every_op_was_waited(rank_pool):
    before = rank_pool.run(planted.pid)
    p2p.check(
        rank_pool, p2p.P2PCase("isend", (p2p.Message(0, 1, 0, fst.TensorSpec((1,), torch.float32), 2),), ((0,), (0,)))
    )
    assert rank_pool.run(planted.pid) == before
