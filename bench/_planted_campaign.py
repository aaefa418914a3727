"""The time-to-find benchmark's planted bugs, one or more per property family, and how to plant one.

``bench/_plant_site/sitecustomize.py`` plants the family named by ``FUZZDIST_BENCH_PLANT`` in every
Python process started with that folder on ``PYTHONPATH`` (the campaign and its ``--jobs`` workers), so
the benchmark runs the plain ``fuzzdist run`` command.  Before the CLI collects anything, the family's
driver-side ``check`` (``fuzzdist.properties.<module>.check``) is replaced by one that passes a
planted stand-in from ``tests/helpers/planted_*.py`` (a faulty collective, process group, optimizer,
...) unless the caller passed its own.  The properties look
``check`` up on the module at each call, so every property of the family runs the planted bug; the
ranks unpickle the stand-in by name, so ``tests/`` goes on ``sys.path`` (and ``PYTHONPATH``, for them).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Plant:
    """One planted bug: ``module.check`` gets ``keyword=<helpers module>.<name>`` (and ``extra``)."""

    family: str
    module: str  # under fuzzdist.properties
    keyword: str
    helper: str  # "planted_fsdp:CorruptingLargeReduceScatter" (a module of tests/helpers)
    files: tuple[str, ...]  # the property files whose properties run it (their failures count)
    only_name: str | None = None  # collectives.check(pool, name, ...): plant only for this collective
    extra: tuple[tuple[str, Any], ...] = ()
    as_mapping: str | None = None  # pass {as_mapping: stand-in} (functional.check's ``functions``)


PLANTS: dict[str, Plant] = {
    p.family: p
    for p in (
        Plant("broadcast", "broadcast", "broadcast", "planted:broadcast_corrupting_large", ("test_broadcast.py",)),
        Plant(
            "autograd-collectives",
            "collectives",
            "all_reduce",
            "planted_collectives:all_reduce_dropping_last_rank",
            ("test_autograd_collectives.py",),
            only_name="all_reduce",
        ),
        Plant(
            "functional-collectives",
            "functional",
            "functions",
            "planted_functional:all_gather_single_ignoring_gather_dim",
            ("test_functional_collectives.py",),
            as_mapping="ALL_GATHER_OP",
        ),
        Plant(
            "dtensor",
            "dtensor",
            "full_tensor",
            "planted_collectives:full_tensor_dropping_last_uneven_shard",
            ("test_dtensor_roundtrip.py",),
        ),
        Plant(
            "ddp",
            "ddp",
            "wrap",
            "planted_pg:CorruptingLargeAllreducePG",
            ("test_ddp_parity.py",),
            extra=(("wrap_args", (8,)),),
        ),
        Plant("fsdp", "fsdp", "reduce_scatter", "planted_fsdp:CorruptingLargeReduceScatter", ("test_fsdp_parity.py",)),
        Plant("zero", "zero", "optimizer_class", "planted_zero:LosesStateOnLoad", ("test_zero.py",)),
        Plant("join", "join", "ddp_class", "planted_join:SkipsFinalSync", ("test_join.py",)),
        Plant(
            "pipelining", "pipelining", "schedule_class", "planted_pipelining:MisalignsTargets", ("test_pipelining.py",)
        ),
        Plant(
            "tensor-parallel",
            "tensor_parallel",
            "parallelize",
            "planted_tensor_parallel:ignoring_src_data_rank",
            ("test_tensor_parallel.py",),
        ),
        Plant(
            "sharded-tensor",
            "sharded_tensor",
            "gather",
            "planted_sharded_tensor:gather_in_rank_order",
            ("test_sharded_tensor.py",),
        ),
        Plant(
            "checkpoint",
            "checkpoint",
            "load",
            "planted_checkpoint:load_reading_only_the_first_chunk",
            ("test_checkpoint.py",),
        ),
        Plant(
            "shared-tensors",
            "shared_tensors",
            "share",
            "planted_sharing:share_pickling_large",
            ("test_shared_tensors.py",),
        ),
        Plant("zero-copy", "zero_copy", "convert", "planted_sharing:as_tensor_copying_float64", ("test_zero_copy.py",)),
        Plant("subgroups", "subgroups", "new_group", "planted_p2p:new_group_always_sorted", ("test_subgroups.py",)),
    )
}


def stand_in(plant: Plant) -> Any:
    """The planted stand-in itself, imported from tests/helpers."""
    module_name, _, name = plant.helper.partition(":")
    module = importlib.import_module(f"helpers.{module_name}")
    value = getattr(module, name)
    if plant.as_mapping is not None:
        return {getattr(module, plant.as_mapping): value}
    return value


def install(plant: Plant) -> None:
    """Replace ``fuzzdist.properties.<module>.check`` by one that runs the planted stand-in."""
    module = importlib.import_module(f"fuzzdist.properties.{plant.module}")
    original = module.check
    planted = stand_in(plant)

    @functools.wraps(original)
    def check(*args: Any, **kwargs: Any) -> Any:
        if plant.only_name is None or plant.only_name in args[1:2]:
            kwargs.setdefault(plant.keyword, planted)
            for key, value in plant.extra:
                kwargs.setdefault(key, value)
        return original(*args, **kwargs)

    module.check = check


ENV = "FUZZDIST_BENCH_PLANT"


def install_from_env() -> None:
    """Plant the family named by ``$FUZZDIST_BENCH_PLANT`` (nothing when it is unset)."""
    family = os.environ.get(ENV)
    if not family:
        return
    if family not in PLANTS:
        raise SystemExit(f"{ENV}={family!r}: not a planted family; one of {', '.join(sorted(PLANTS))}")
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    install(PLANTS[family])
