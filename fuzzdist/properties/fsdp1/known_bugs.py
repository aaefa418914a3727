"""The known torch bugs the FSDP1 parity property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from fuzzdist.errors import RankCrash
from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import every_problem, every_rank_raised, example_of
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Kind, Problem
from fuzzdist.properties.fsdp1.config import FSDP1Config


def _hybrid_shard_size_one(config: FSDP1Config) -> bool:
    """Whether ``config`` meets fsdp1-hybrid-shard-size-one-skips-replicas: HYBRID_SHARD with shard groups of
    one rank."""
    return config.hybrid_mesh is not None and config.hybrid_mesh[1] == 1


def _adam_with_orig_params(config: FSDP1Config) -> bool:
    """Whether ``config`` meets fsdp1-optim-state-dict-exp-avg-is-exp-avg-sq: Adam or AdamW state of a
    ``use_orig_params=True`` model saved with FULL_STATE_DICT (the one type it was seen with) by a sharded
    strategy (NO_SHARD's full optimizer state dict holds the right ``exp_avg``)."""
    return (
        config.use_orig_params
        and config.optimizer in ("adam", "adamw")
        and config.state_dict_type == "FULL_STATE_DICT"
        and config.sharding_strategy != "NO_SHARD"
    )


def _explained(config: FSDP1Config, problem: Problem) -> bool:
    """Whether one of the two wrong-result bugs that ``config`` meets explains ``problem``: a gradient beyond
    its bound (the replicas never averaged), a bitwise difference after the state-dict round trip (the
    wrong ``exp_avg``: only the round trip compares bitwise), or the count of problems a rank left out."""
    if problem.kind is Kind.MORE:
        return True
    if problem.kind is not Kind.MISMATCH or problem.symptom is not None:
        return False
    return _hybrid_shard_size_one(config) if problem.bound is not None else _adam_with_orig_params(config)


def _is_hybrid_shard_size_one(example: Mapping[str, Any], failure: BaseException) -> bool:
    """HYBRID_SHARD on a mesh whose shard dim has one rank, and every problem explained (FSDP1 clamps the
    strategy to NO_SHARD over the one-rank shard group, so each rank keeps its own gradient, divided by the
    world size; where the config also meets the ``exp_avg`` bug, its round-trip differences are allowed)."""
    config = example_of(example, "config", FSDP1Config)
    if config is None or not _hybrid_shard_size_one(config):
        return False
    return every_problem(failure, lambda p: _explained(config, p))


register(
    KnownBug(id="fsdp1-hybrid-shard-size-one-skips-replicas", where=("fsdp1",), recognise=_is_hybrid_shard_size_one)
)


def _is_exp_avg_lost(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A ``use_orig_params=True`` model trained with Adam or AdamW, and every problem explained (see
    ``_explained``): the fresh model, loaded with a full optimizer state dict whose ``exp_avg`` holds
    ``exp_avg_sq``, steps elsewhere."""
    config = example_of(example, "config", FSDP1Config)
    if config is None or not _adam_with_orig_params(config):
        return False
    return every_problem(failure, lambda p: _explained(config, p))


register(KnownBug(id="fsdp1-optim-state-dict-exp-avg-is-exp-avg-sq", where=("fsdp1",), recognise=_is_exp_avg_lost))


def _is_local_state_dict_load_refused(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A ``use_orig_params=True`` model round-tripping a LOCAL_STATE_DICT, and every rank that raised raised
    load_state_dict's RuntimeError about the ``_flat_param`` key its own ``state_dict()`` wrote."""
    config = example_of(example, "config", FSDP1Config)
    if config is None or not config.use_orig_params or config.state_dict_type != "LOCAL_STATE_DICT":
        return False
    return every_rank_raised(failure, RuntimeError, "Unexpected key(s) in state_dict", "_flat_param")


register(
    KnownBug(
        id="fsdp1-local-state-dict-orig-params-load-fails",
        where=("fsdp1",),
        recognise=_is_local_state_dict_load_refused,
    )
)


# gloo's words when an all-gather's peers send more bytes than the receiver expects, and the FSDP1 method
# whose all-gather it is
_GLOO_SIZE_MISMATCH = "Received data size doesn't match expected size"
_UNSHARD_GRAD = "unshard_grad"


def _is_summon_grads_dtype_abort(example: Mapping[str, Any], failure: BaseException) -> bool:
    """A sharded ``use_orig_params=True`` model of a dtype other than float32 whose ranks died, every one of
    them on gloo's size check inside ``unshard_grad``: a rank without a gradient shard stands in for it with
    float32 zeros in ``summon_full_params(with_grads=True)``'s all-gather, which the other ranks fill with
    shards of the model's dtype."""
    config = example_of(example, "config", FSDP1Config)
    if config is None or not isinstance(failure, RankCrash):
        return False
    if not config.use_orig_params or config.sharding_strategy == "NO_SHARD" or example.get("dtype") == torch.float32:
        return False
    died = evidence.died(failure)
    return bool(died) and all(evidence.says(p, _GLOO_SIZE_MISMATCH) and evidence.says(p, _UNSHARD_GRAD) for p in died)


register(
    KnownBug(
        id="fsdp1-summon-grads-none-shard-float32-aborts", where=("fsdp1",), recognise=_is_summon_grads_dtype_abort
    )
)


# ShardedTensor's words when a shard's placement names a rank outside the process group
_NOT_IN_GROUP = "does not exist in input process group"


def _is_local_state_dict_group_rank(example: Mapping[str, Any], failure: BaseException) -> bool:
    """HYBRID_SHARD over more than one shard group, saved with LOCAL_STATE_DICT, and every rank that raised
    raised ShardedTensor's ValueError about a rank outside its group: FSDP1's local post-state-dict hook places
    each shard on the rank's index within its shard group, which ShardedTensor reads as a global rank, so
    every shard group but the one holding global ranks 0, 1, ... is refused."""
    config = example_of(example, "config", FSDP1Config)
    if config is None or config.hybrid_mesh is None or config.state_dict_type != "LOCAL_STATE_DICT":
        return False
    if config.hybrid_mesh[0] == 1:  # one shard group, holding global ranks 0, 1, ...: the indices agree
        return False
    return every_rank_raised(failure, ValueError, _NOT_IN_GROUP)


register(
    KnownBug(
        id="fsdp1-local-state-dict-hybrid-shard-group-rank",
        where=("fsdp1",),
        recognise=_is_local_state_dict_group_rank,
    )
)
