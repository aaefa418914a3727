"""Known torch bugs, each run on its pinned minimal example (``fuzzdist.known_bugs``).

A bug that still reproduces is reported KNOWN (a strict xfail, in effect); one that no longer
reproduces fails the test, saying torch fixed it, so running the suite against a newer torch tells
which entries to narrow or drop.  The examples are what fuzzdist shrank each bug to.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

from fuzzdist import known_bugs
from fuzzdist.driver.plugin import PoolKey
from fuzzdist.pool import capabilities
from fuzzdist.strategies import TensorSpec


def _broadcast(pool: Any, spec: TensorSpec, src: int, seed: int, world_size: int) -> None:
    from fuzzdist.properties import broadcast

    broadcast.check(pool, spec, src, seed)


def _collective(pool: Any, name: str, case: Any, world_size: int) -> None:
    from fuzzdist.properties import collectives

    collectives.check(pool, name, case)


def _functional(pool: Any, case: Any, world_size: int) -> None:
    from fuzzdist.properties import functional

    functional.check(pool, case)


def _functional_case() -> Any:
    """What fuzzdist shrank gloo-functional-all-to-all-complex-raises to (two all_reduces come first:
    the strategy's draws shrink to all_reduce, and the third call is where the bug is)."""
    functional = _property("functional")
    reduce = functional.Call("all_reduce", TensorSpec((1,), torch.float32))
    return functional.FunctionalCase(
        calls=(reduce, reduce, functional.Call("all_to_all_single", TensorSpec((2,), torch.complex64))),
        order=(0, 1, 2),
        completions=("wait_tensor",) * 3,
        seed=0,
    )


def _fsdp1(pool: Any, config: Any, dtype: torch.dtype, seed: int, world_size: int) -> None:
    from fuzzdist.properties import fsdp1

    fsdp1.check(pool, config, dtype, seed)


def _fsdp1_config(**fields: Any) -> Any:
    """An FSDP1 config of one 1->1 layer on 2 ranks, batch 1, with ``fields``."""
    from fuzzdist.properties.fsdp1.config import FSDP1Config

    return FSDP1Config(widths=(1, 1), batch_sizes=(1, 1), **fields)


def _reshard_model(pool: Any, case: Any, world_size: int) -> None:
    from fuzzdist.properties.reshard import model_state

    model_state.check_model(pool, case)


def _reshard_model_case(**fields: Any) -> Any:
    """A model-state resharding case with ``fields``."""
    from fuzzdist.properties.reshard.model_state import ModelReshardCase, Sharding

    return ModelReshardCase(2, 3, (3, 2), load=Sharding("fsdp1"), **fields)


def _by_case(module: str) -> Callable[..., None]:
    """The runner of a property whose check takes ``(pool, case)`` (object collectives, p2p, subgroups)."""

    def run(pool: Any, case: Any, world_size: int) -> None:
        importlib.import_module(f"fuzzdist.properties.{module}").check(pool, case)

    return run


# What a property module needs from torch beyond torch.distributed (fuzzdist.pool.capabilities' probes).
_NEEDS = {"functional": "functional_collectives", "collectives": "distributed_nn", "fsdp": "fully_shard"}


def _missing(module: str) -> str | None:
    """Why this torch can't run the property ``module``, or None (then importing it must work)."""
    need = _NEEDS.get(module)
    return capabilities.missing(need) if need else None


def _property(module: str) -> Any:
    """The property module; skipped where this torch lacks what it needs, any other ImportError fails."""
    reason = _missing(module)
    if reason:
        pytest.skip(f"this torch can't run the {module} property: {reason}")
    return importlib.import_module(f"fuzzdist.properties.{module}")


def _object_case() -> Any:
    m = _property("object_collectives")
    return m.ObjectCase("all_gather_object", 0, (None, m.Tensor(TensorSpec((1,), torch.uint16), 0)))


def _p2p_case() -> Any:
    m = _property("p2p")
    return m.P2PCase("batch", (m.Message(0, 0, 0, TensorSpec((1,), torch.float32), 0),), ((), (), ()))


def _mesh_case() -> Any:
    m = _property("subgroups")
    return m.SubgroupCase(
        (m.Group("mesh", (1, 0), (2,), True, False),), (("all_reduce", "SUM"),), TensorSpec((1,), torch.float32), 0
    )


def _case(**fields: Any) -> Any:
    collectives = _property("collectives")
    return collectives.Case(**fields)


def _check_pg(pool: Any, call: Any, world_size: int, backend: str) -> None:
    """One check-pg call on gloo, compared with check-pg's reference; raises its ConformanceFailure."""
    from fuzzdist.conformance import _rank
    from fuzzdist.errors import ConformanceFailure

    observed = pool.run(_rank.run_calls, "fuzzdist.conformance:gloo", (call,))
    problems = call.info.check(call, world_size, [obs[0] for obs in observed])
    if problems:
        raise ConformanceFailure(f"{call.describe()}:\n" + "\n".join(f"  {p}" for p in problems), problems)


def _check_pg_async(
    pool: Any, calls: tuple[Any, ...], wait_order: tuple[int, ...], world_size: int, backend: str
) -> None:
    """check-pg's async check of ``calls`` on gloo, waited in ``wait_order`` (repeats bounded)."""
    from fuzzdist.conformance import _rank
    from fuzzdist.errors import ConformanceFailure

    observed = pool.run(_rank.run_calls, "fuzzdist.conformance:gloo", calls, wait_order)
    problems = [
        replace(p, call=i, op=call.op)
        for i, call in enumerate(calls)
        for p in call.info.check(call, world_size, [o[i] for o in observed])
    ]
    if problems:
        raise ConformanceFailure("async:\n" + "\n".join(f"  {p}" for p in problems), problems)


def _call(op: str, **fields: Any) -> Any:
    from fuzzdist.conformance import OpCall

    return OpCall(op, **fields)


RUNNERS: dict[str, Callable[..., None]] = {
    "broadcast": _broadcast,
    "collectives": _collective,
    "functional": _functional,
    "object_collectives": _by_case("object_collectives"),
    "p2p": _by_case("p2p"),
    "subgroups": _by_case("subgroups"),
    "check-pg:allreduce": _check_pg,
    "check-pg:reduce_scatter_tensor": _check_pg,
    "check-pg:async": _check_pg_async,
    "fsdp1": _fsdp1,
    "reshard": _reshard_model,
}

# bug id -> (where, the pinned minimal example's fields; world_size picks the pool; check-pg's examples name
# the backend, as check-pg's own do: its predicates recognise gloo's bugs on gloo only)
PINNED: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "gloo-broadcast-ignores-strides": (
        "broadcast",
        lambda: dict(spec=TensorSpec((2, 2), torch.float32, "transposed"), src=0, seed=0, world_size=2),
    ),
    "nn-all-reduce-backward-non-sum": (
        "collectives",
        lambda: dict(
            name="all_reduce", case=_case(spec=TensorSpec((1,), torch.float32), seed=0, op="PRODUCT"), world_size=2
        ),
    ),
    "nn-reduce-backward-ignores-op": (
        "collectives",
        lambda: dict(name="reduce", case=_case(spec=TensorSpec((1,), torch.float32), seed=0, op="MAX"), world_size=2),
    ),
    "nn-all-gather-grad-transposed": (
        "collectives",
        lambda: dict(
            name="all_gather",
            case=_case(spec=TensorSpec((2, 2), torch.float32), seed=0, grad_layout="transposed"),
            world_size=2,
        ),
    ),
    "gloo-scatter-ignores-strides": (
        "collectives",
        lambda: dict(
            name="all_to_all",
            case=_case(spec=TensorSpec((2, 2), torch.float32), seed=0, out_layout="transposed"),
            world_size=2,
        ),
    ),
    "gloo-functional-all-to-all-complex-raises": ("functional", lambda: dict(case=_functional_case(), world_size=2)),
    "wide-unsigned-unpickle-objects": ("object_collectives", lambda: dict(case=_object_case(), world_size=2)),
    "gloo-p2p-self-loop-unclear-error": ("p2p", lambda: dict(case=_p2p_case(), world_size=3)),
    "device-mesh-local-rank-not-coordinate": ("subgroups", lambda: dict(case=_mesh_case(), world_size=3)),
    "gloo-bool-sum-stores-2": (
        "check-pg:allreduce",
        lambda: dict(
            call=_call("allreduce", spec=TensorSpec((1,), torch.bool), seed=3, reduce_op="SUM"),
            world_size=2,
            backend="gloo",
        ),
    ),
    "gloo-reduce-scatter-stack-aborts": (
        "check-pg:reduce_scatter_tensor",
        lambda: dict(
            call=_call("reduce_scatter_tensor", spec=TensorSpec((2,), torch.float32), reduce_op="SUM", form="stack"),
            world_size=2,
            backend="gloo",
        ),
    ),
    "gloo-p2p-second-wait-blocks": (
        "check-pg:async",
        lambda: dict(
            calls=(
                _call("allreduce", spec=TensorSpec((1,), torch.float32), reduce_op="SUM"),
                _call("barrier", late_rank=0),
                _call("allreduce", spec=TensorSpec((1,), torch.float32), reduce_op="SUM"),
                _call("send_recv", spec=TensorSpec((1,), torch.float32), root=0, peer=1),
            ),
            wait_order=(0, 1, 2, 3, 3),
            world_size=2,
            backend="gloo",
        ),
    ),
    "fsdp1-hybrid-shard-size-one-skips-replicas": (
        "fsdp1",
        lambda: dict(
            config=_fsdp1_config(sharding_strategy="HYBRID_SHARD", hybrid_mesh=(2, 1)),
            dtype=torch.float32,
            seed=0,
            world_size=2,
        ),
    ),
    "fsdp1-optim-state-dict-exp-avg-is-exp-avg-sq": (
        "fsdp1",
        lambda: dict(
            config=_fsdp1_config(use_orig_params=True, optimizer="adam"), dtype=torch.float32, seed=0, world_size=2
        ),
    ),
    "fsdp1-dcp-load-raises-missing-key-optim-param-groups": (
        "reshard",
        lambda: dict(case=_reshard_model_case(), world_size=3),  # DDP saves on 2 ranks, FSDP1 loads on 3
    ),
    "fsdp1-local-state-dict-orig-params-load-fails": (
        "fsdp1",
        lambda: dict(
            config=_fsdp1_config(use_orig_params=True, state_dict_type="LOCAL_STATE_DICT"),
            dtype=torch.float32,
            seed=0,
            world_size=2,
        ),
    ),
}


# Property modules with known bugs: a torch that can't run one skips its entries, and says so.
_REGISTERING = ("object_collectives", "p2p", "subgroups", "functional")


def _params() -> list[Any]:
    out = []
    for name in _REGISTERING:
        reason = _missing(name)
        if reason:  # a torch without what the property needs: its bugs can't run here, and say so
            out.append(
                pytest.param(
                    f"{name}-entries",
                    id=f"{name}-entries",
                    marks=pytest.mark.skip(
                        reason=f"the {name} property's known bugs: this torch can't run it: {reason}"
                    ),
                )
            )
        else:
            importlib.import_module(f"fuzzdist.properties.{name}")
    for bug_id in sorted(known_bugs.registry()):
        marks = (
            []
            if bug_id in PINNED
            else [
                pytest.mark.skip(
                    reason=f"no pinned example of {bug_id} runs from pytest here (see its reproducer script)"
                )
            ]
        )
        out.append(pytest.param(bug_id, id=bug_id, marks=marks))
    return out


@pytest.mark.parametrize("bug_id", _params())
def test_known_bug_still_reproduces(request, rank_pools, bug_id):
    """The bug's minimal example still fails the property with the bug's symptom (KNOWN); if the
    property now holds, torch fixed it and this fails, naming the entry to narrow or drop."""
    where, make = PINNED[bug_id]
    example = make()
    pool = rank_pools.get(PoolKey(example["world_size"], "gloo", "cpu", request.config.getoption("fuzzdist_timeout")))
    if not known_bugs.reproduces(bug_id, where, example, lambda: RUNNERS[where](pool, **example)):
        pytest.fail(known_bugs.fixed_message(bug_id))
