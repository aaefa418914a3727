"""The known-bug predicates of the subgroups, object-collective, point-to-point, functional, collectives and
tensor-parallel properties recognise a failure only when every problem in it is the bug's own symptom on the
input that triggers it: the same inputs with another symptom, or with the symptom plus anything else, stay a
failure.  Hand-built failures, in the form the properties' ranks report them (the real bugs are recognised on
their pinned examples in properties/test_known_torch_bugs.py, or by their reproducers in docs/findings/)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from fuzzdist import known_bugs
from fuzzdist.errors import CallRaised, PropertyFailure, RankError
from fuzzdist.problems import Kind, Problem, Symptom
from fuzzdist.strategies import TensorSpec

F32 = TensorSpec((1,), torch.float32)


def _failed(results: list) -> PropertyFailure:
    """A property's failure as its check raises it: the ranks' problems in the message and the results."""
    return PropertyFailure(f"ranks went wrong: { {r: p for r, p in enumerate(results) if p} }", results)


def _recognised(where: str, example: dict, failure: BaseException) -> str | None:
    bug = known_bugs.recognise(where, example, failure)
    return None if bug is None else bug.id


# -- subgroups: device-mesh-local-rank-not-coordinate ------------------------------------------------


def _mesh_example() -> dict:
    from fuzzdist.properties import subgroups

    return {
        "case": subgroups.SubgroupCase(
            (subgroups.Group("mesh", (1, 0), (2,)),), (("all_reduce", "SUM"), ("all_gather", 0)), F32, 0
        )
    }


LOCAL_RANK = Problem(
    Kind.MISMATCH, "mesh dim 0 of (1, 0) (2,): get_local_rank(0)", got=0, expected=1, symptom=Symptom.MESH_SORTED_ORDER
)
GATHER = Problem(
    Kind.MISMATCH,
    "all_gather on mesh [1, 0] (mesh dim 0, group order [1, 0]): output 0 (group rank 0 = rank 1)",
    index=0,
    got=2.0,
    expected=1.0,
    count=1,
    size=1,
    symptom=Symptom.MESH_SORTED_ORDER,
)
SUM_WRONG = Problem(
    Kind.MISMATCH,
    "all_reduce(SUM) on mesh [1, 0] (mesh dim 0, group order [1, 0])",
    index=0,
    got=3.0,
    expected=2.0,
    bound=1e-6,
    count=1,
    size=1,
)


def test_mesh_order_is_recognised_from_the_sorted_order_symptoms():
    failure = _failed([[LOCAL_RANK, GATHER], [GATHER]])
    assert _recognised("subgroups", _mesh_example(), failure) == "device-mesh-local-rank-not-coordinate"


@pytest.mark.parametrize(
    "results",
    [
        [[SUM_WRONG], None],  # all_reduce SUM can't depend on the order: never this bug
        [[LOCAL_RANK], [SUM_WRONG]],  # the symptom on one rank, something else on another
        [[replace(LOCAL_RANK, symptom=None)], None],  # a local rank that is not the sorted order's
        [[replace(GATHER, symptom=None)], None],  # outputs not in the sorted order
    ],
    ids=["sum", "sum-beside", "local-rank", "gather"],
)
def test_mesh_order_other_symptoms_stay_failures(results):
    assert _recognised("subgroups", _mesh_example(), _failed(results)) is None


@pytest.mark.fuzzdist(world_size=2)
def test_a_wrong_all_reduce_on_an_unsorted_mesh_stays_a_failure(rank_pool):
    from helpers import planted_p2p

    from fuzzdist.properties import subgroups

    case = subgroups.SubgroupCase((subgroups.Group("mesh", (1, 0), (2,)),), (("all_reduce", "SUM"),), F32, 0)
    with known_bugs.collecting() as tally, pytest.raises(PropertyFailure):
        subgroups.check(rank_pool, case, collectives={"all_reduce": planted_p2p.all_reduce_adding_one})
    assert not tally


# -- object collectives: wide-unsigned-unpickle-objects ----------------------------------------------


def _object_example(op: str, objects: tuple) -> dict:
    from fuzzdist.properties import object_collectives

    return {"case": object_collectives.ObjectCase(op, 0, objects)}


def _uint16():
    from fuzzdist.properties import object_collectives

    return object_collectives.Tensor(TensorSpec((1,), torch.uint16), 0)


def _unpickle(op: str) -> Problem:
    """What a rank's object collective reports when torch can't unpickle a wide tensor."""
    return Problem.raised(AttributeError("type object 'torch.storage.UntypedStorage' has no attribute 'dtype'"), op=op)


def test_unpickle_error_on_every_rank_that_receives_a_wide_tensor_is_recognised():
    example = _object_example("all_gather_object", (None, _uint16()))
    failure = _failed([[_unpickle("all_gather_object")]] * 2)
    assert _recognised("object_collectives", example, failure) == "wide-unsigned-unpickle-objects"
    scatter = _object_example("scatter_object_list", ([_uint16(), None], None))
    only_rank_0 = _failed([[_unpickle("scatter_object_list")], None])
    assert _recognised("object_collectives", scatter, only_rank_0) == "wide-unsigned-unpickle-objects"


def test_unpickle_predicate_other_symptoms_stay_failures():
    example = _object_example("all_gather_object", (None, _uint16()))
    wrong = Problem(Kind.MISMATCH, op="all_gather_object", detail="obj[0]: got 8")
    beside = _failed([[_unpickle("all_gather_object")], [wrong]])
    assert _recognised("object_collectives", example, beside) is None  # another rank's bug is not hidden
    # a wide tensor that never travels: a non-root rank's broadcast list, a scatter piece for another rank
    unsent = _object_example("broadcast_object_list", ([None], [_uint16()]))
    failure = _failed([None, [_unpickle("broadcast_object_list")]])
    assert _recognised("object_collectives", unsent, failure) is None
    scatter = _object_example("scatter_object_list", ([_uint16(), None], None))
    rank_1 = _failed([None, [_unpickle("scatter_object_list")]])
    assert _recognised("object_collectives", scatter, rank_1) is None


# -- p2p: gloo-p2p-self-loop-unclear-error -----------------------------------------------------------


def _p2p_example() -> dict:
    from fuzzdist.properties import p2p

    transposed = TensorSpec((2, 2), torch.float32, "transposed")
    return {"case": p2p.P2PCase("batch", (p2p.Message(0, 0, 0, F32, 1), p2p.Message(0, 1, 3, transposed, 2)), ((), ()))}


PAIR = "[../third_party/gloo/gloo/transport/tcp/pair.cc:1] Pair is not connected"


def _refused(peer: int, tag: int, words: str = PAIR) -> Problem:
    """A send or receive to ``peer`` with ``tag`` that gloo refused with ``words``, as the p2p property reports it."""
    return Problem.raised(
        RuntimeError(words),
        f"batch wait for the send to rank {peer} and the receive from it (tag {tag}, {F32}, a self-loop)",
        symptom=Symptom.REFUSED_UNCLEARLY,
        subject=(peer, tag),
    )


SELF_LOOP = _refused(0, 0)


def test_self_loop_refused_with_pair_not_connected_is_recognised():
    assert _recognised("p2p", _p2p_example(), _failed([[SELF_LOOP], None])) == "gloo-p2p-self-loop-unclear-error"


def test_self_loop_refused_with_torch_2_6s_words_is_recognised():
    """torch 2.6.0's gloo refuses the same self-loop from the same tcp pair with other words."""
    words = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:331] writev [none]: Bad file descriptor"
    assert (
        _recognised("p2p", _p2p_example(), _failed([[_refused(0, 0, words)], None]))
        == "gloo-p2p-self-loop-unclear-error"
    )
    other = _refused(0, 0, "writev: Bad file descriptor")  # not gloo's pair
    assert _recognised("p2p", _p2p_example(), _failed([[other], None])) is None


@pytest.mark.parametrize(
    "results",
    [
        # a refusal between two distinct ranks, with the same unclear error, beside the self-loop
        [[SELF_LOOP], [_refused(0, 3)]],
        [[_refused(0, 5)], None],  # no self-loop with that tag
        [None, [SELF_LOOP]],  # rank 1 has no self-loop (and rank 0 is not rank 1 itself)
        [[_refused(0, 0, "Connection reset by peer")], None],
    ],
    ids=["distinct-ranks", "other-tag", "other-rank", "other-error"],
)
def test_self_loop_predicate_other_symptoms_stay_failures(results):
    assert _recognised("p2p", _p2p_example(), _failed(results)) is None


def _raises_type_error(*args, **kwargs):
    raise TypeError("unsupported operand type(s) for +: 'int' and 'self'")


def test_an_unrelated_error_mentioning_self_is_not_a_clear_refusal():
    from fuzzdist.properties import p2p

    pending: list[str] = []
    m = p2p.Message(0, 0, 0, TensorSpec((2, 2), torch.float32, "transposed"), 1)
    problem = p2p._try_refused(m, True, "isend", {"isend": _raises_type_error}, None, pending)
    assert problem is not None and problem.symptom is Symptom.REFUSED_UNCLEARLY and not pending


# -- functional: gloo-functional-all-to-all-complex-raises -------------------------------------------


def _functional_example() -> dict:
    functional = pytest.importorskip("fuzzdist.properties.functional")
    calls = (
        functional.Call("all_to_all_single", TensorSpec((2,), torch.float32)),
        functional.Call("all_to_all_single", TensorSpec((2,), torch.complex64)),
    )
    return {"case": functional.FunctionalCase(calls, (0, 1), ("wait_tensor",) * 2)}


def _rank_error(*errors: str | Exception, stragglers: tuple[int, ...] = ()) -> RankError:
    excs = {r: e if isinstance(e, Exception) else RuntimeError(e) for r, e in enumerate(errors)}
    return RankError(
        list(excs),
        {r: "Traceback ..." for r in excs},
        dict.fromkeys(excs, "builtins.RuntimeError"),
        excs,
        stragglers=stragglers,
    )


def _call_raised(index: int, message: str = "Invalid scalar type") -> CallRaised:
    return CallRaised(Problem.raised(RuntimeError(message), call=index, op="all_to_all_single"))


def test_functional_all_to_all_complex_is_recognised_from_the_call_that_raised():
    failure = _rank_error(_call_raised(1), _call_raised(1))
    assert _recognised("functional", _functional_example(), failure) == "gloo-functional-all-to-all-complex-raises"


@pytest.mark.parametrize(
    "failure",
    [
        _rank_error(_call_raised(0), _call_raised(0)),  # the real all_to_all_single raised it: not the complex one
        _rank_error(_call_raised(1), _call_raised(1, "Connection reset by peer")),  # another error on one rank
        _rank_error("Invalid scalar type", "Invalid scalar type"),  # not tied to a call
        _rank_error(_call_raised(1), stragglers=(1,)),  # a rank left waiting
        _failed([[_call_raised(1).problem], None]),
    ],
    ids=["other-call", "other-error", "untied", "straggler", "property-failure"],
)
def test_functional_all_to_all_complex_other_symptoms_stay_failures(failure):
    assert _recognised("functional", _functional_example(), failure) is None


# -- collectives: nn-reduce-backward-ignores-op ------------------------------------------------------


def _reduce_example(name: str = "reduce", op: str = "MAX") -> dict:
    collectives = pytest.importorskip("fuzzdist.properties.collectives")
    return {"name": name, "case": collectives.Case(spec=F32, seed=0, op=op), "world_size": 2}


def _grad_problem(collectives, op: str, got: float, g: float = 0.5) -> str | None:
    """What the rank function reports for rank 0's gradient (x = 1 on rank 0, 2 on rank 1; upstream g)."""
    xs = [torch.tensor([1.0]), torch.tensor([2.0])]
    return collectives._op_grad("grad of input", torch.tensor([got]), xs, 0, torch.tensor([g]), op)


def test_reduce_gradient_that_is_sums_is_named_so_and_recognised():
    collectives = pytest.importorskip("fuzzdist.properties.collectives")
    assert _grad_problem(collectives, "MAX", 0.0) is None  # rank 0 doesn't hold the max: 0 is right
    assert _grad_problem(collectives, "MIN", 0.5) is None  # it holds the min: g is right
    assert _grad_problem(collectives, "PRODUCT", 1.0) is None  # g * 2
    assert _grad_problem(collectives, "AVG", 0.25) is None  # g / 2
    for op in ("MAX", "PRODUCT", "AVG"):
        problem = _grad_problem(collectives, op, 0.5)  # what torch gives: SUM's gradient
        assert problem is not None and problem.symptom is Symptom.SUM_GRAD_FOR_ANY_OP
        for name in ("reduce", "reduce_scatter"):
            assert (
                _recognised("collectives", _reduce_example(name, op), _failed([[problem], None]))
                == "nn-reduce-backward-ignores-op"
            )


SUMS = Problem(
    Kind.MISMATCH, "grad of input", index=0, got=0.5, expected=0.0, count=1, size=1, symptom=Symptom.SUM_GRAD_FOR_ANY_OP
)


@pytest.mark.parametrize(
    "example, results",
    [
        (_reduce_example(op="SUM"), [[SUMS]]),
        (_reduce_example(name="all_reduce"), [[SUMS]]),
        (_reduce_example(), [[replace(SUMS, symptom=None)]]),  # not SUM's
        (_reduce_example(), [[SUMS], [Problem(Kind.MISMATCH, "output", index=0, got=3.0, expected=2.0)]]),
    ],
    ids=["sum", "all-reduce", "another-gradient", "and-a-wrong-output"],
)
def test_reduce_backward_other_symptoms_stay_failures(example, results):
    assert _recognised("collectives", example, _failed(results)) is None


def test_a_gradient_other_than_sums_is_not_named_sums():
    collectives = pytest.importorskip("fuzzdist.properties.collectives")
    problem = _grad_problem(collectives, "MAX", 1.5)  # neither right (0) nor SUM's (0.5)
    assert problem is not None and problem.symptom is None


# -- tensor_parallel: tp-rowwise-uneven-sequence-view-fails ------------------------------------------

VIEW_ERROR = (
    "view size is not compatible with input tensor's size and stride (at least one dimension spans "
    "across two contiguous subspaces). Use .reshape(...) instead."
)
IN_LINEAR_FORWARD = (
    "Traceback (most recent call last):\n"
    '  File "/x/torch/nn/modules/linear.py", line 134, in forward\n'
    "    return F.linear(input, self.weight, self.bias)\n"
)
IN_BACKWARD = 'Traceback (most recent call last):\n  File "/x/torch/_tensor.py", line 630, in backward\n'
IN_AUTOGRAD_ENGINE = IN_BACKWARD + (
    '  File "/x/torch/autograd/graph.py", line 979, in _engine_run_backward\n'
    "    return Variable._execution_engine.run_backward(\n"
)


def _tp_example(batch: int = 2, seq: int = 3, sequence_dim: int = 1, rowwise_input: str | None = "T") -> dict:
    """What fuzzdist shrank the bug to, or that config with one field changed: a Colwise layer handing a DTensor
    sharded on the sequence to a Rowwise one."""
    tp = pytest.importorskip("fuzzdist.properties.tensor_parallel")
    colwise_out = "T" if rowwise_input == "T" else None
    layers = (
        tp.TPLayer("colwise", 1, None, colwise_out, False, True),
        tp.TPLayer("rowwise", 1, rowwise_input, None, None, True),
    )
    return {"config": tp.TPConfig(2, batch, seq, 1, layers, "R", sequence_dim, 0), "seed": 0}


def _tp_rank_error(
    messages: dict[int, str], tracebacks: dict[int, str] | None = None, stragglers: tuple[int, ...] = ()
) -> RankError:
    excs = {r: RuntimeError(m) for r, m in messages.items()}
    tbs = tracebacks or dict.fromkeys(excs, IN_LINEAR_FORWARD)
    return RankError(
        list(excs),
        {r: tbs[r] + f"RuntimeError: {excs[r]}" for r in excs},
        dict.fromkeys(excs, "builtins.RuntimeError"),
        excs,
        stragglers=stragglers,
    )


def test_tp_rowwise_uneven_sequence_view_is_recognised():
    assert (
        _recognised("tensor_parallel", _tp_example(), _tp_rank_error({0: VIEW_ERROR}, stragglers=(1,)))
        == "tp-rowwise-uneven-sequence-view-fails"
    )  # what the campaign saw: rank 1 (its feature piece empty) waits
    assert (
        _recognised("tensor_parallel", _tp_example(), _tp_rank_error({0: VIEW_ERROR, 1: VIEW_ERROR}))
        == "tp-rowwise-uneven-sequence-view-fails"
    )  # wider features: every rank raises


def test_tp_colwise_uneven_sequence_backward_is_recognised():
    """A Colwise layer putting its output on the uneven sequence (Shard(-1) -> Shard(1)) before another
    Colwise one: the backward's all-to-all the other way raises on every rank (what a CI run met)."""
    tp = pytest.importorskip("fuzzdist.properties.tensor_parallel")
    layers = (tp.TPLayer("colwise", 2, None, "T", False, True), tp.TPLayer("colwise", 1, "T", None, None, True))
    example = {"config": tp.TPConfig(2, 2, 3, 1, layers, "R", 1, 0), "seed": 0}
    failure = _tp_rank_error({0: VIEW_ERROR, 1: VIEW_ERROR}, dict.fromkeys((0, 1), IN_AUTOGRAD_ENGINE))
    assert _recognised("tensor_parallel", example, failure) == "tp-rowwise-uneven-sequence-view-fails"
    even = {"config": tp.TPConfig(2, 2, 4, 1, layers, "R", 1, 0), "seed": 0}
    assert _recognised("tensor_parallel", even, failure) is None


@pytest.mark.parametrize(
    "example, failure",
    [
        (_tp_example(seq=4), _tp_rank_error({0: VIEW_ERROR})),  # an even sequence
        (_tp_example(seq=1), _tp_rank_error({0: VIEW_ERROR})),  # a sequence of 1: the padding can't matter
        (_tp_example(batch=1), _tp_rank_error({0: VIEW_ERROR})),  # nothing outside the sequence dim
        (_tp_example(sequence_dim=0), _tp_rank_error({0: VIEW_ERROR})),  # the leading dim sharded
        (
            _tp_example(rowwise_input=None),
            _tp_rank_error({0: VIEW_ERROR}),
        ),  # the Rowwise input on its default Shard(-1)
        (
            _tp_example(),
            _tp_rank_error({0: "mat1 and mat2 shapes cannot be multiplied (6x1 and 2x1)"}),
        ),  # another error
        (_tp_example(), _tp_rank_error({0: VIEW_ERROR, 1: "Connection reset by peer"})),  # another error beside it
        (_tp_example(), _tp_rank_error({1: VIEW_ERROR}, stragglers=(0,))),  # rank 0's piece is never empty
        (_tp_example(), _tp_rank_error({0: VIEW_ERROR}, {0: IN_BACKWARD})),  # not in forward nor autograd
        (_tp_example(), _failed([[Problem(Kind.NOTE, detail=VIEW_ERROR)], None])),  # not raised
    ],
    ids=[
        "even",
        "seq-1",
        "batch-1",
        "dim-0",
        "default-input",
        "other-error",
        "beside",
        "rank-1-only",
        "backward",
        "property-failure",
    ],
)
def test_tp_rowwise_uneven_sequence_other_symptoms_stay_failures(example, failure):
    assert _recognised("tensor_parallel", example, failure) is None


# -- tensor_parallel: tp-sequence-parallel-short-sequence-replicated ---------------------------------


def _local_piece(
    rank: int, got: tuple[int, ...], expected: tuple[int, ...], got_dtype: str = "torch.float64"
) -> Problem:
    """A rank's local output of the wrong shape, as the tensor-parallel property reports it."""
    return Problem(
        Kind.SHAPE, "output's local piece", rank=rank, got=(got, got_dtype), expected=(expected, "torch.float64")
    )


CAMPAIGN_LOCAL_PIECE = _local_piece(1, (1, 1, 1), (1, 0, 1))


def _sp_example(seq: int = 1, world: int = 2, last: str = "sequence", sequence_dim: int = 1) -> dict:
    """What the campaign found (a SequenceParallel LayerNorm, use_local_output=True, last), or it with one field
    changed."""
    tp = pytest.importorskip("fuzzdist.properties.tensor_parallel")
    layers = (
        tp.TPLayer(kind="colwise", out_features=2),
        tp.TPLayer(kind="colwise", out_features=1, input_layout="H", use_local_output=False),
        tp.TPLayer(kind=last, out_features=1, use_local_output=True),
    )
    return {"config": tp.TPConfig(world, 1, seq, 1, layers, "R", sequence_dim, None), "seed": 0}


def test_tp_sequence_parallel_short_sequence_local_output_is_recognised():
    assert (
        _recognised("tensor_parallel", _sp_example(), _failed([None, [CAMPAIGN_LOCAL_PIECE]]))
        == "tp-sequence-parallel-short-sequence-replicated"
    )  # what the campaign saw
    three_of_four = [_local_piece(r, (1, 3, 1), (1, e, 1)) for r, e in ((0, 1), (1, 1), (2, 1), (3, 0))]
    assert (
        _recognised("tensor_parallel", _sp_example(seq=3, world=4), _failed([[p] for p in three_of_four]))
        == "tp-sequence-parallel-short-sequence-replicated"
    )  # every rank whose piece isn't the whole
    from torch.distributed.tensor import Replicate, Shard

    replicated = Problem(Kind.SHAPE, "output", got=((1, 1, 1), (Replicate(),)), expected=((1, 1, 1), (Shard(1),)))
    assert (
        _recognised("tensor_parallel", _sp_example(), _failed([[replicated], [replicated]]))
        == "tp-sequence-parallel-short-sequence-replicated"
    )  # the DTensor form still


@pytest.mark.parametrize(
    "example, failure",
    [
        (_sp_example(seq=2), _failed([None, [CAMPAIGN_LOCAL_PIECE]])),  # an even sequence
        (_sp_example(last="colwise"), _failed([None, [CAMPAIGN_LOCAL_PIECE]])),  # the last layer not SequenceParallel
        (_sp_example(sequence_dim=0), _failed([None, [CAMPAIGN_LOCAL_PIECE]])),  # on dim 0, rank 1's chunk is (0, 1, 1)
        (_sp_example(), _failed([None, [_local_piece(1, (1, 2, 1), (1, 0, 1))]])),  # not the whole output
        (_sp_example(), _failed([None, [_local_piece(1, (1, 1, 1), (1, 1, 1))]])),  # not the rank's chunk
        (_sp_example(), _failed([None, [_local_piece(1, (1, 1, 1), (1, 0, 1), "torch.float32")]])),  # another dtype
        (_sp_example(), _failed([[_local_piece(0, (1, 1, 1), (1, 0, 1))], None])),  # rank 0's piece isn't empty
        (
            _sp_example(),
            _failed(
                [
                    [
                        Problem(
                            Kind.MISMATCH,
                            "output's local piece",
                            rank=0,
                            index=0,
                            got=1.0,
                            expected=2.0,
                            count=1,
                            size=1,
                            worst=True,
                        )
                    ],
                    [CAMPAIGN_LOCAL_PIECE],
                ]
            ),
        ),  # values beside it
    ],
    ids=["even", "not-sequence", "dim-0", "other-shape", "not-chunk", "dtype", "rank-0", "values-beside"],
)
def test_tp_sequence_parallel_short_sequence_other_symptoms_stay_failures(example, failure):
    assert _recognised("tensor_parallel", example, failure) is None
