"""With Hypothesis's observability on, fuzzdist's test cases carry what the ranks did.

The end-to-end test runs properties on a real RankPool in a pytest subprocess with
``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY`` set, reads back the JSON lines Hypothesis wrote and
checks them against the observation schema Hypothesis documents (``schema_observations.json``
in its docs; Hypothesis ships no schema file, so :func:`schema_problems` states the documented
keys and types).  The rest runs in-process, on a controller whose ranks answer at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Set
from typing import Any

import hypothesis.core
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.internal.observability import with_observability_callback

from fuzzdist.compat import hypothesis_internals as _hypothesis_compat
from fuzzdist.errors import PropertyFailure, RankCrash
from fuzzdist.pool import messages
from fuzzdist.pool import observability as _observability
from fuzzdist.pool import remote as _remote
from fuzzdist.pool.controller import FIRST_PROBE_S, Controller, Outcome

# -- the observation schema, as Hypothesis documents it ------------------------------------------

TEST_CASE_KEYS = {
    "type",
    "status",
    "status_reason",
    "representation",
    "arguments",
    "how_generated",
    "features",
    "coverage",
    "timing",
    "metadata",
    "property",
    "run_start",
}
INFO_KEYS = {"type", "title", "content", "property", "run_start"}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def schema_problems(obs: dict[str, Any]) -> list[str]:
    """What in ``obs`` breaks Hypothesis's observation schema: every key required, no other key,
    each of its type (a test case's ``timing`` maps names to seconds >= 0, its ``coverage`` files to
    distinct line numbers >= 1, or is null)."""
    problems = []
    if obs.get("type") == "test_case":
        keys, types = (
            TEST_CASE_KEYS,
            {
                "status": lambda v: v in ("passed", "failed", "gave_up"),
                "status_reason": lambda v: isinstance(v, str),
                "representation": lambda v: isinstance(v, str),
                "arguments": lambda v: isinstance(v, dict),
                "how_generated": lambda v: v is None or isinstance(v, str),
                "features": lambda v: isinstance(v, dict),
                "coverage": lambda v: (
                    v is None
                    or (
                        isinstance(v, dict)
                        and all(
                            isinstance(lines, list)
                            and len(set(lines)) == len(lines)
                            and all(isinstance(n, int) and n >= 1 for n in lines)
                            for lines in v.values()
                        )
                    )
                ),
                "timing": lambda v: isinstance(v, dict) and all(_number(s) and s >= 0 for s in v.values()),
                "metadata": lambda v: isinstance(v, dict),
            },
        )
    elif obs.get("type") in ("info", "alert", "error"):
        keys, types = (
            INFO_KEYS,
            {"title": lambda v: isinstance(v, str), "content": lambda v: isinstance(v, (str, dict))},
        )
    else:
        return [f"unknown type {obs.get('type')!r}"]
    types |= {"property": lambda v: isinstance(v, str), "run_start": _number}
    problems += [f"missing {k}" for k in sorted(keys - obs.keys())]
    problems += [f"unexpected {k}" for k in sorted(obs.keys() - keys)]
    problems += [f"{k}={obs[k]!r}" for k, ok in types.items() if k in obs and not ok(obs[k])]
    return problems


def test_the_schema_check_finds_what_breaks_the_schema():
    good = {
        "type": "test_case",
        "status": "passed",
        "status_reason": "",
        "representation": "f(x=1)",
        "arguments": {"x": 1},
        "how_generated": "generated",
        "features": {},
        "coverage": {"f.py": [1, 2]},
        "timing": {"execute:test": 0.5},
        "metadata": {},
        "property": "f",
        "run_start": 1.0,
    }
    assert schema_problems(good) == []
    assert schema_problems({**good, "timing": {"fuzzdist:rank0": -1.0}}) == ["timing={'fuzzdist:rank0': -1.0}"]
    assert schema_problems({**good, "extra": 1}) == ["unexpected extra"]
    assert schema_problems({k: v for k, v in good.items() if k != "features"}) == ["missing features"]
    assert schema_problems({**good, "coverage": {"f.py": [0]}, "status": "ok"}) == [
        "status='ok'",
        "coverage={'f.py': [0]}",
    ]
    assert schema_problems({"type": "info", "title": "t", "content": {}, "property": "f", "run_start": 1}) == []


# -- a real RankPool, Hypothesis writing its JSON lines --------------------------------------------

RANK_FNS = """
import time

import torch
import torch.distributed as dist


def rank_1_sleeps(ctx, spec):
    if ctx.rank == 1:
        time.sleep(0.05)
    return ctx.rank


def rank_1_raises(ctx, n):
    if ctx.rank == 1:
        raise ValueError(f"planted failure on rank 1 (n={n})")
    return n


def rank_0_waits_alone(ctx, n):
    t = torch.ones(n)
    dist.all_reduce(t)
    if ctx.rank == 0:
        dist.all_reduce(t)  # rank 1 never enters it: a certain deadlock
    return n
"""

PROPERTIES = """
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import fuzzdist.strategies as fst
import obs_rank_fns
from fuzzdist import RankPool
from fuzzdist.errors import PropertyFailure

# A failing property stops at its first example (no shrinking); Hypothesis then replays it once.
FEW = settings(max_examples=3, database=None, derandomize=True, deadline=None, phases=[Phase.generate],
               suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def pool():
    with RankPool(2, timeout=10, straggler_grace=1) as pool:
        yield pool


@FEW
@given(spec=fst.tensor_specs())
def test_passes(pool, spec):
    pool.run(obs_rank_fns.rank_1_sleeps, spec)


@FEW
@given(n=st.integers(1, 3))
def test_rank_error(pool, n):
    pool.run(obs_rank_fns.rank_1_raises, n)


@FEW
@given(n=st.integers(1, 3))
def test_rank_timeout(pool, n):
    pool.run(obs_rank_fns.rank_0_waits_alone, n)


@FEW
@given(n=st.integers(1, 3))
def test_property_failure(pool, n):
    results = pool.run(obs_rank_fns.rank_1_sleeps, n)
    raise PropertyFailure(f"planted: the ranks returned {results}", results)


@FEW
@given(n=st.integers())
def test_without_a_pool(n):
    pass
"""


@pytest.fixture(scope="module")
def observed(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """The test-case observations of PROPERTIES, by test name, as Hypothesis wrote them."""
    root = tmp_path_factory.mktemp("observability")
    (root / "obs_rank_fns.py").write_text(RANK_FNS)
    (root / "test_observed.py").write_text(PROPERTIES)
    env = dict(
        os.environ, HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY="1", HYPOTHESIS_STORAGE_DIRECTORY=str(root / "hypothesis")
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_observed.py"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert "3 failed" in summary and "2 passed" in summary, run.stdout + run.stderr
    files = sorted((root / "hypothesis" / "observed").glob("*_testcases.jsonl"))
    assert files, f"Hypothesis wrote no observations under {root}"
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    by_test: dict[str, list[dict[str, Any]]] = {}
    for obs in lines:
        assert schema_problems(obs) == [], obs
        by_test.setdefault(obs["property"].rsplit("::", 1)[-1], []).append(obs)
    return by_test


def _fuzzdist_features(obs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obs["features"].items() if k.startswith("fuzzdist:")}


def test_a_passing_example_carries_each_ranks_outcome_and_wall_time(observed):
    cases = observed["test_passes"]
    assert len(cases) == 3 and {obs["status"] for obs in cases} == {"passed"}
    for obs in cases:
        assert _fuzzdist_features(obs) == {
            "fuzzdist:world_size": 2,
            "fuzzdist:backend": "gloo",
            "fuzzdist:device": "cpu",
            "fuzzdist:rank0": "ok",
            "fuzzdist:rank1": "ok",
        }
        assert any(k.startswith("dtype=") for k in obs["features"])  # the drawn spec's coverage events
        timing = obs["timing"]
        assert 0 <= timing["fuzzdist:rank0"] and timing["fuzzdist:rank1"] >= 0.05  # rank 1 slept 0.05s
        # Measured on the rank, inside the driver's test: no longer than the test itself.
        assert timing["fuzzdist:rank1"] <= timing["execute:test"] + timing["overall:gc"]


def _failures(observed, test: str) -> list[dict[str, Any]]:
    cases = observed[test]
    assert {obs["status"] for obs in cases} == {"failed"}
    assert "minimal failing test case" in {obs["how_generated"] for obs in cases}
    return cases


def test_a_rank_error_carries_the_raising_rank_and_the_failure_kind(observed):
    for obs in _failures(observed, "test_rank_error"):
        features = _fuzzdist_features(obs)
        assert features["fuzzdist:rank0"] == "ok" and features["fuzzdist:rank1"] == "raised ValueError"
        assert features["fuzzdist:failure"] == "RankError" and "fuzzdist:hang" not in features
        assert {"fuzzdist:rank0", "fuzzdist:rank1"} <= obs["timing"].keys()
        assert "planted failure on rank 1" in obs["metadata"]["traceback"]


def test_a_hang_carries_the_hung_rank_the_failure_and_the_hang_kind(observed):
    for obs in _failures(observed, "test_rank_timeout"):
        features = _fuzzdist_features(obs)
        assert features["fuzzdist:rank0"] == "timeout" and features["fuzzdist:rank1"] == "ok"
        assert features["fuzzdist:failure"] == "RankTimeout" and features["fuzzdist:hang"] == "MissedCollective"
        # The hung rank never answered: its time is how long the pool waited, at least until its first look.
        assert obs["timing"]["fuzzdist:rank0"] >= FIRST_PROBE_S


def test_a_property_failure_in_the_driver_is_the_failure_kind(observed):
    for obs in _failures(observed, "test_property_failure"):
        features = _fuzzdist_features(obs)
        assert features["fuzzdist:failure"] == "PropertyFailure"
        assert features["fuzzdist:rank0"] == features["fuzzdist:rank1"] == "ok"


def test_test_cases_without_a_pool_are_left_alone(observed):
    for obs in observed["test_without_a_pool"]:
        assert _fuzzdist_features(obs) == {}
        assert not [k for k in obs["timing"] if k.startswith("fuzzdist:")]


# -- in-process: a controller whose ranks answer at once ----------------------------------------


def answer(ctx, value):  # the "rank function" the instant controller pretends to run
    return value


class InstantController(Controller):
    """Every rank answers ``ok`` at once, with ``elapsed`` = 0.5 + rank."""

    def __init__(self, world_size: int = 2) -> None:
        super().__init__(world_size, "gloo", "cpu", timeout=5.0, straggler_grace=None)

    def _send(self, seq: int, seed: int, payload: bytes, message: bytes) -> None:
        self._seq = seq

    def _receive(self, out: Outcome, seconds: float) -> bool:
        for rank in sorted(out.pending):
            out.take(rank, messages.load(messages.ok(out.seq, rank, [], elapsed=0.5 + rank)))
        return True

    def _snapshots(self, seq: int, ranks: Set[int], with_stack: bool) -> dict:
        return {}

    def _stacks(self, seq: int, ranks: Set[int]) -> dict[int, str]:
        return {}

    def _crash(self, dead: Set[int]) -> RankCrash:
        raise AssertionError("no rank dies here")

    def _recover(self, failure: BaseException) -> None:
        pass

    def close(self) -> None:
        pass


ONE = settings(max_examples=1, database=None, deadline=None, phases=[Phase.generate])


def test_with_observability_off_the_controller_records_nothing(monkeypatch):
    def must_not_run(*args):
        raise AssertionError("recorded observations with observability off")

    monkeypatch.setattr(_observability, "recording", must_not_run)
    pool = InstantController()

    @ONE
    @given(st.just(1))
    def prop(x):
        assert pool.run(answer, x) == [0, 1]

    assert not _hypothesis_compat.observability_enabled()
    prop()


def test_with_observability_on_the_ranks_times_are_in_timing():
    pool, seen = InstantController(3), []

    @ONE
    @given(st.just(1))
    def prop(x):
        pool.run(answer, x)
        pool.run(answer, x)  # two calls in one example: each rank's times add up

    with with_observability_callback(seen.append):
        prop()
    (obs,) = [o for o in seen if o.type == "test_case"]
    assert {k: v for k, v in obs.timing.items() if k.startswith("fuzzdist:")} == {
        "fuzzdist:rank0": 1.0,
        "fuzzdist:rank1": 3.0,
        "fuzzdist:rank2": 5.0,
    }
    assert obs.features["fuzzdist:world_size"] == 3 and obs.features["fuzzdist:rank2"] == "ok"


def _adds_timing() -> bool:
    """Whether fuzzdist's timing wrapper stands in for Hypothesis's ``make_testcase`` now."""
    return getattr(hypothesis.core.make_testcase, "_fuzzdist_adds_timing", False)


def test_the_timing_wrapper_is_in_place_only_while_an_example_has_times_to_add():
    pool, seen, during = InstantController(2), [], []

    @ONE
    @given(st.just(1))
    def prop(x):
        during.append(_adds_timing())
        pool.run(answer, x)
        during.append(_adds_timing())

    assert not _adds_timing()
    with with_observability_callback(seen.append):
        prop()
    assert during == [False, True]  # put in place by the example's first pool.run
    assert not _adds_timing()  # and Hypothesis's own back once the example's observation was built
    (obs,) = [o for o in seen if o.type == "test_case"]
    assert {"fuzzdist:rank0", "fuzzdist:rank1"} <= obs.timing.keys()


def _outcome(world_size: int) -> Outcome:
    return Outcome(seq=1, world_size=world_size, straggler_grace=1.0)


def test_each_ranks_outcome_and_time():
    out = _outcome(5)
    out.take(0, messages.load(messages.ok(1, None, [], elapsed=0.25)))
    out.take(1, ("err", {"seq": 1, "error": _remote_record("builtins.KeyError"), "recycle": [], "elapsed": 0.5}))
    out.take(2, messages.load(messages.load_error(1, _remote_record("builtins.ImportError"))))
    out.died(3)  # rank 4 never answered
    crash = RankCrash([3], {3: -11}, {})
    assert _observability.rank_outcomes(out, crash) == {
        0: "ok",
        1: "raised KeyError",
        2: "load_error",
        3: "crash (SIGSEGV)",
        4: "unfinished",
    }
    assert _observability.rank_times(out, waited=2.0) == {
        "fuzzdist:rank0": 0.25,
        "fuzzdist:rank1": 0.5,
        "fuzzdist:rank3": 2.0,
        "fuzzdist:rank4": 2.0,
    }
    alive = _outcome(2)
    alive.take(1, messages.load(messages.ok(1, None, [])))
    assert _observability.rank_outcomes(alive, None) == {0: "timeout", 1: "ok"}


def _remote_record(type_name: str) -> Any:
    return _remote.RemoteRecord(type_name, "x", "", None, None, None, None)


def test_a_property_failure_outside_an_example_records_nothing():
    with with_observability_callback(lambda obs: None):
        assert str(PropertyFailure("no example here")) == "no example here"


def test_without_hypothesiss_internal_names_timing_is_skipped_not_an_error(monkeypatch):
    monkeypatch.delattr(hypothesis.core, "make_testcase")
    with _hypothesis_compat.example_context(answer, {}):
        assert _hypothesis_compat.add_example_timing({"fuzzdist:rank0": 1.0}) is False
    assert _hypothesis_compat.add_example_timing({"fuzzdist:rank0": 1.0}) is False  # outside an example
