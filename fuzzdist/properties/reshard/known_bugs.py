"""The known torch bugs the resharding properties run into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the example's case and the failure's :class:`~fuzzdist.problems.Problem` records,
never a message's words (torch's own only through ``evidence.says``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.distributed.checkpoint.api import CheckpointException

from fuzzdist.known_bugs.predicates import every_rank_raised, example_of
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.properties.reshard.model_state import ModelReshardCase


def _is_fsdp1_load_missing_key(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Loading into FSDP1 with a sharded strategy, and every rank that raised raised DCP's CheckpointException
    naming the key torch names, ``optim.param_groups``, as missing from the checkpoint (which shapes and world
    sizes fail is not known: the predicate leaves that to the error)."""
    case = example_of(example, "case", ModelReshardCase)
    if case is None or case.load.kind != "fsdp1" or case.load.strategy == "NO_SHARD":
        return False
    missing = "Missing key in checkpoint state_dict: optim.param_groups."
    return every_rank_raised(failure, CheckpointException, missing)


register(
    KnownBug(
        id="fsdp1-dcp-load-raises-missing-key-optim-param-groups",
        where=("reshard",),
        recognise=_is_fsdp1_load_missing_key,
    )
)
