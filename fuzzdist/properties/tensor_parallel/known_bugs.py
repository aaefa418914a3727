"""The known torch bugs the tensor-parallel property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import every_problem, every_rank_raised, example_of, raised_saying
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.tensor_parallel import SGD_STEP, TPConfig, TPLayer

_TP_INPLACE = "in-place operations that require placement changes are not supported"


def _with_inputs(config: TPConfig) -> Iterator[tuple[TPLayer, int]]:
    """Each layer of a tensor_parallel config with its input width (a SequenceParallel layer keeps it)."""
    width = config.in_features
    for layer in config.layers:
        yield layer, width
        if layer.kind != "sequence":
            width = layer.out_features


def _tp_has_empty_shard(config: TPConfig | None) -> bool:
    """Whether some Colwise/Rowwise Linear of a tensor_parallel config has a sharded parameter dim smaller
    than the world size (some rank's piece empty): Colwise shards out_features, Rowwise in_features."""
    return config is not None and any(
        (layer.kind == "colwise" and layer.out_features < config.world_size)
        or (layer.kind == "rowwise" and width < config.world_size)
        for layer, width in _with_inputs(config)
    )


def _is_tp_empty_shard_step(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is the SGD step raising DTensor's in-place placement-change error, with some gradient
    placed Replicate() for a Shard parameter, on a config with an empty parameter shard."""
    if not _tp_has_empty_shard(example_of(example, "config", TPConfig)):
        return False
    from torch.distributed.tensor import Replicate, Shard

    def replicated_grad_of_shard(moved: tuple[Any, ...]) -> bool:
        _, grad_placements, param_placements = moved
        return (
            len(grad_placements) == len(param_placements) == 1
            and isinstance(grad_placements[0], Replicate)
            and isinstance(param_placements[0], Shard)
        )

    return every_problem(
        failure,
        lambda p: (
            p.kind is Kind.RAISED
            and p.what == SGD_STEP
            and evidence.says(p, _TP_INPLACE)
            and any(replicated_grad_of_shard(moved) for moved in p.subject)
        ),
    )


register(
    KnownBug(id="tp-colwise-empty-shard-step-fails", where=("tensor_parallel",), recognise=_is_tp_empty_shard_step)
)


# -- tensor parallelism: shards emptier than the mesh, continued -------------------------------------

_TP_RESHAPE_SHARDED = "would remove or reshape sharded dimension"


def _tp_rowwise_narrower_than_mesh(config: TPConfig | None) -> bool:
    """Whether some RowwiseParallel Linear of a tensor_parallel config has fewer input features than ranks."""
    return config is not None and any(
        layer.kind == "rowwise" and width < config.world_size for layer, width in _with_inputs(config)
    )


def _is_tp_rowwise_empty_shard_forward(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A config with a Rowwise Linear narrower than the mesh, and every rank that raised raised DTensor's
    "would remove or reshape sharded dimension" RuntimeError."""
    if not _tp_rowwise_narrower_than_mesh(example_of(example, "config", TPConfig)):
        return False
    return every_rank_raised(failure, RuntimeError, _TP_RESHAPE_SHARDED)


register(
    KnownBug(
        id="tp-rowwise-empty-shard-forward-fails",
        where=("tensor_parallel",),
        recognise=_is_tp_rowwise_empty_shard_forward,
    )
)


_TP_VIEW_INCOMPATIBLE = "view size is not compatible with input tensor's size and stride"
_LINEAR_FORWARD = r'nn[/\\]modules[/\\]linear\.py", line \d+, in forward'
_AUTOGRAD_BACKWARD = r'autograd[/\\]graph\.py", line \d+, in _engine_run_backward'


def _tp_rowwise_uneven_sequence_input(config: TPConfig | None) -> bool:
    """Whether a tensor_parallel config moves an activation between Shard(seq) and Shard(-1) with DTensor's
    all-to-all over an uneven sequence, which leaves padding in the local tensor's strides: a RowwiseParallel
    Linear taking its input sharded on the sequence dim (``input_layout`` "T": Shard(seq) -> Shard(-1) in
    the forward) or a ColwiseParallel one putting its output there (``output_layout`` "T": Shard(-1) ->
    Shard(seq), whose backward runs the other way); the sequence (dim 1) longer than 1 and not divisible by
    the world size, with a batch of more than 1 outside it.  (Such an activation is a DTensor: the strategy
    hands local sequence shards over only where the sequence divides evenly.)"""
    if config is None or not config.layers or config.sequence_dim != 1:
        return False
    layers, world, batch, seq = config.layers, config.world_size, config.batch, config.seq
    if not (batch > 1 and seq > 1 and seq % world != 0):
        return False
    return any(
        (layer.kind == "rowwise" and layer.input_layout == "T")
        or (layer.kind == "colwise" and layer.output_layout == "T")
        for layer in layers
    )


def _is_tp_rowwise_uneven_sequence_view(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A config with a Rowwise Linear fed an uneven sequence shard (above), and the ranks raised view's "size is
    not compatible" RuntimeError inside an nn.Linear's forward, rank 0 among them (its piece of the features is
    never empty); ranks whose piece is empty can go on into the next collective, so stragglers are allowed."""
    if not _tp_rowwise_uneven_sequence_input(example_of(example, "config", TPConfig)):
        return False
    errors = evidence.raised(failure)
    if not errors or errors[0].rank != 0:
        return False
    return all(
        raised_saying(p, RuntimeError, _TP_VIEW_INCOMPATIBLE)
        and (evidence.says_pattern(p, _LINEAR_FORWARD) or evidence.says_pattern(p, _AUTOGRAD_BACKWARD))
        for p in errors
    )


register(
    KnownBug(
        id="tp-rowwise-uneven-sequence-view-fails",
        where=("tensor_parallel",),
        recognise=_is_tp_rowwise_uneven_sequence_view,
    )
)


def _is_tp_sequence_parallel_short_sequence(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A config whose last layer is SequenceParallel over a sequence shorter than the mesh, and every problem
    is the output placed Replicate() where Shard(sequence dim) was expected, or, with use_local_output=True,
    a rank's local output the whole output (the local tensor of that Replicate() DTensor) where its
    torch.chunk piece of the sequence dim was expected."""
    config = example_of(example, "config", TPConfig)
    if config is None or not config.layers or config.layers[-1].kind != "sequence":
        return False
    world = config.world_size
    dim = config.sequence_dim
    size = config.shape[dim]
    if not size < world:
        return False
    whole = tuple(config.output_shape())

    def chunk(rank: int) -> tuple[int, ...]:  # the rank's torch.chunk piece: one position each, the last ones empty
        return whole[:dim] + (1 if rank < size else 0,) + whole[dim + 1 :]

    def replicated(problem: Problem) -> bool:  # the output's placements: (shape, placements) pairs
        from torch.distributed.tensor import Replicate, Shard

        if problem.kind is not Kind.SHAPE or problem.what != "output" or not isinstance(problem.got, tuple):
            return False
        got, expected = problem.got[1], problem.expected[1]
        return (
            len(got) == len(expected) == 1
            and isinstance(got[0], Replicate)
            and isinstance(expected[0], Shard)
            and expected[0].dim == dim
        )

    def whole_local(problem: Problem) -> bool:  # a rank's local output: (shape, dtype) pairs
        if problem.kind is not Kind.SHAPE or problem.what != "output's local piece" or problem.rank is None:
            return False
        (got, got_dtype), (expected, expected_dtype) = problem.got, problem.expected
        return (
            got_dtype == expected_dtype
            and problem.rank < world
            and got == whole
            and expected == chunk(problem.rank) != whole
        )

    return every_problem(failure, lambda problem: replicated(problem) or whole_local(problem))


register(
    KnownBug(
        id="tp-sequence-parallel-short-sequence-replicated",
        where=("tensor_parallel",),
        recognise=_is_tp_sequence_parallel_short_sequence,
    )
)
