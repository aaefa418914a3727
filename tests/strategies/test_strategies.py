"""Tests for fuzzdist.strategies: each strategy shrinks to its documented
minimum, and every value it generates is valid."""

from __future__ import annotations

import inspect
import math
import os
import pickle
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import fuzzdist.strategies as fs
from fuzzdist.strategies import (
    CompletionOrder,
    CudaAllocatorMode,
    DDPConfig,
    SharingStrategyMode,
    TensorSpec,
)

# find() must not replay examples stored by other find() calls: the example
# database keys on the condition's source, and every `lambda x: True` looks
# the same.
NO_DB = settings(database=None, max_examples=2000)
MANY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SMALL_BYTES = 1 << 14


def minimal(strategy, condition=lambda _: True):
    return find(strategy, condition, settings=NO_DB)


def raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as uint8, in logical order (NaN-safe to compare)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def as_float64(t: torch.Tensor) -> list[float]:
    return t.contiguous().reshape(-1).to(torch.float64).tolist()


seeds = st.integers(min_value=-(2**63), max_value=2**64 - 1)


# ---------------------------------------------------------------------------
# public API surface


# Plain functions beside the strategies: what the ranks build an example from, and the argument checks
# that a family's own strategies share; not what is drawn.
NOT_STRATEGIES = {
    "mix_seed",
    "mix_seed_fnv",
    "mesh_shapes",
    "inherited_allocator_settings",
    "check_ints",
    "check_model_arguments",
}


def test_all_names_exported_and_documented():
    for name in fs.__all__:
        obj = getattr(fs, name)
        if name in NOT_STRATEGIES:
            assert obj.__doc__, f"{name} has no docstring"
        elif callable(obj) and not isinstance(obj, type) and name[0].islower():
            assert obj.__doc__ and "hrink" in obj.__doc__, f"{name} doesn't document its shrinking"
    assert not [n for n in fs.__all__ if n.startswith("_")]


# ---------------------------------------------------------------------------
# shapes


def test_shapes_shrink_to_small_1d():
    assert minimal(fs.shapes()) == (1,)
    assert minimal(fs.shapes(min_dims=2)) == (1, 1)


def test_shapes_cover_edge_cases():
    assert minimal(fs.shapes(), lambda s: len(s) == 0) == ()
    assert minimal(fs.shapes(), lambda s: 0 in s) == (0,)
    assert minimal(fs.shapes(), lambda s: 2333 in s) == (2333,)
    assert len(minimal(fs.shapes(max_dims=5), lambda s: len(s) == 5)) == 5


@MANY
@given(st.data())
def test_shapes_respect_bounds(data):
    itemsize = data.draw(st.sampled_from([1, 2, 4, 8, 16]))
    max_bytes = data.draw(st.integers(itemsize, 1 << 16))
    max_dims = data.draw(st.integers(0, 6))
    shape = data.draw(fs.shapes(max_bytes=max_bytes, itemsize=itemsize, max_dims=max_dims))
    assert isinstance(shape, tuple) and len(shape) <= max_dims
    assert all(isinstance(s, int) and s >= 0 for s in shape)
    assert math.prod(shape) * itemsize <= max_bytes


@pytest.mark.parametrize(
    "kwargs", [dict(max_bytes=3, itemsize=4), dict(max_dims=-1), dict(min_dims=3, max_dims=2), dict(itemsize=0)]
)
def test_shapes_reject_bad_arguments(kwargs):
    with pytest.raises(InvalidArgument):
        fs.shapes(**kwargs)


# ---------------------------------------------------------------------------
# dtypes

_EXPECTED_CPU = [
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
]
_OPTIONAL = [
    "uint16",
    "uint32",
    "uint64",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
]


def test_dtypes_cover_everything_cpu_supports():
    got = set(fs.supported_dtypes("cpu"))
    for name in _EXPECTED_CPU:
        assert getattr(torch, name) in got, name
    for name in _OPTIONAL:
        dtype = getattr(torch, name, None)
        if dtype is None:
            continue
        try:  # what a user would check: can CPU hold and compare it at all?
            t = torch.zeros(4, dtype=dtype)
            usable = bool((t == t.clone()).all())
        except Exception:  # noqa: BLE001 - whatever raises means the dtype isn't usable
            usable = False
        assert (dtype in got) == usable, name


def test_dtypes_shrink_to_float32_and_per_kind_minimum():
    assert minimal(fs.dtypes()) == torch.float32
    assert minimal(fs.dtypes(kind="float")) == torch.float32
    assert minimal(fs.dtypes(kind="int")) == torch.int64
    assert minimal(fs.dtypes(kind="complex")) == torch.complex64
    assert minimal(fs.dtypes(kind=("bool", "unsigned"))) == torch.uint8
    assert minimal(fs.dtypes(), lambda d: d.is_complex) == torch.complex64


@pytest.mark.parametrize(
    "kind, check",
    [
        ("float", lambda d: d.is_floating_point and d.itemsize >= 2),
        ("float8", lambda d: d.is_floating_point and d.itemsize == 1),
        ("complex", lambda d: d.is_complex),
        ("int", lambda d: not d.is_floating_point and not d.is_complex and d != torch.bool and torch.iinfo(d).min < 0),
        (
            "unsigned",
            lambda d: d != torch.bool and not d.is_floating_point and not d.is_complex and torch.iinfo(d).min == 0,
        ),
        ("bool", lambda d: d == torch.bool),
    ],
)
def test_dtype_kinds_only_contain_their_kind(kind, check):
    chosen = fs.supported_dtypes("cpu", kind)
    assert chosen
    assert all(check(d) for d in chosen)


def test_dtypes_reject_unknown_kind():
    with pytest.raises(InvalidArgument):
        fs.dtypes(kind="floaty")
    with pytest.raises(InvalidArgument):
        fs.dtypes(kind=())


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_dtypes_on_absent_device_fail_at_draw_not_construction():
    strategy = fs.dtypes(device="cuda")  # constructing is fine
    assert fs.supported_dtypes("cuda") == ()
    with pytest.raises(InvalidArgument):
        minimal(strategy)
    assert not torch.cuda.is_initialized()


# ---------------------------------------------------------------------------
# tensor specs

specs = fs.tensor_specs(max_bytes=SMALL_BYTES)


def test_tensor_specs_shrink_to_one_element_float32():
    assert minimal(specs) == TensorSpec((1,), torch.float32)
    assert minimal(specs, lambda s: s.layout == "transposed") == TensorSpec((2, 2), torch.float32, "transposed")
    assert minimal(specs, lambda s: s.layout == "sliced") == TensorSpec((1,), torch.float32, "sliced", storage_offset=1)
    assert minimal(specs, lambda s: s.layout == "channels_last").shape == (1, 1, 1, 1)


def _check_layout(spec: TensorSpec, t: torch.Tensor) -> None:
    if spec.layout == "contiguous":
        assert t.is_contiguous() and t.storage_offset() == 0
    elif spec.layout == "sliced":
        assert t.is_contiguous() and t.storage_offset() == spec.storage_offset > 0
    elif spec.layout == "transposed":
        assert not t.is_contiguous()
    elif spec.layout == "channels_last":
        assert t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)
    else:
        pytest.fail(spec.layout)


def _is_special_float(x: float, info: torch.finfo) -> bool:
    if math.isnan(x) or math.isinf(x) or x == 0.0:
        return True
    a = abs(x)
    return a in (1.0, info.max, abs(info.min), info.tiny, info.eps) or a < info.tiny


def _check_pattern(spec: TensorSpec, t: torch.Tensor) -> None:
    dtype = spec.dtype
    b = raw_bytes(t).reshape(spec.numel, dtype.itemsize) if spec.numel else None
    if spec.pattern == "constant" and spec.numel:
        assert bool((b == b[0]).all())
    if spec.pattern == "random" and spec.numel and (dtype.is_floating_point or dtype.is_complex):
        real = torch.view_as_real(t) if dtype.is_complex else t
        assert all(math.isfinite(x) for x in as_float64(real))
    if spec.pattern == "special" and spec.numel:
        if dtype == torch.bool:
            if spec.numel >= 2:
                assert set(t.reshape(-1).tolist()) == {False, True}
        elif dtype.is_complex or dtype.is_floating_point:
            real = torch.view_as_real(t) if dtype.is_complex else t
            comp = real.dtype
            info = torch.finfo(comp)
            values = as_float64(real)
            assert all(_is_special_float(x, info) for x in values), values
            if spec.numel >= 64:
                assert any(math.isnan(x) for x in values)
                if comp in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
                    assert math.inf in values and -math.inf in values
                    assert any(x == 0 and math.copysign(1, x) < 0 for x in values)
                    assert any(0 < abs(x) < info.tiny for x in values)  # subnormal
        else:
            info = torch.iinfo(dtype)
            values = set(t.reshape(-1).tolist())
            allowed = {info.min, info.max, 0, 1, info.max - 1}
            if info.min < 0:
                allowed |= {-1, info.min + 1}
            assert values <= allowed
            if spec.numel >= 64:
                assert {info.min, info.max} <= values


@MANY
@given(specs, seeds)
def test_materialize_never_raises_and_honours_the_spec(spec, seed):
    t = spec.materialize("cpu", seed)
    assert isinstance(t, torch.Tensor)
    assert t.shape == spec.shape
    assert t.dtype == spec.dtype
    assert t.device.type == "cpu"
    assert t.numel() == spec.numel
    assert spec.nbytes == t.numel() * t.element_size() <= SMALL_BYTES
    _check_layout(spec, t)
    _check_pattern(spec, t)


@MANY
@given(specs, seeds)
def test_materialize_is_deterministic(spec, seed):
    first = spec.materialize("cpu", seed)
    again = pickle.loads(pickle.dumps(spec)).materialize(torch.device("cpu"), seed)
    assert again.stride() == first.stride()
    assert again.storage_offset() == first.storage_offset()
    assert torch.equal(raw_bytes(first), raw_bytes(again))


@MANY
@given(
    fs.tensor_specs(
        shapes=fs.shapes(max_bytes=4096, min_dims=1).filter(lambda s: math.prod(s) >= 64),
        patterns="random",
    ),
    seeds,
    seeds,
)
def test_different_seeds_give_different_random_tensors(spec, seed_a, seed_b):
    if seed_a % 2**64 == seed_b % 2**64:
        seed_b = seed_a + 1
    a = spec.materialize("cpu", seed_a)
    b = spec.materialize("cpu", seed_b)
    assert not torch.equal(raw_bytes(a), raw_bytes(b))


@SOME
@given(specs.filter(lambda s: s.layout != "contiguous"), seeds)
def test_logical_values_do_not_depend_on_layout(spec, seed):
    plain = TensorSpec(spec.shape, spec.dtype, "contiguous", spec.pattern)
    assert torch.equal(raw_bytes(spec.materialize("cpu", seed)), raw_bytes(plain.materialize("cpu", seed)))


@SOME
@given(specs, seeds)
def test_materialize_leaves_global_rng_alone(spec, seed):
    before = torch.get_rng_state()
    spec.materialize("cpu", seed)
    assert torch.equal(before, torch.get_rng_state())


def test_materialize_is_identical_in_another_process():
    cases = [
        (TensorSpec((3, 7), dtype, layout, pattern, 2 if layout == "sliced" else 0), seed)
        for dtype in fs.supported_dtypes("cpu")
        for layout, pattern, seed in (
            ("transposed", "random", 5),
            ("sliced", "special", 11),
            ("contiguous", "constant", 2**63 + 3),
        )
    ]
    local = [bytes(raw_bytes(s.materialize("cpu", seed)).tolist()) for s, seed in cases]
    code = (
        "import pickle, sys\n"
        "cases = pickle.load(sys.stdin.buffer)\n"
        "out = [bytes(s.materialize('cpu', seed).contiguous().reshape(-1).view(__import__('torch').uint8).tolist())"
        " for s, seed in cases]\n"
        "pickle.dump(out, sys.stdout.buffer)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(cases), capture_output=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert pickle.loads(proc.stdout) == local


def test_tensor_spec_repr_is_short_and_evaluable():
    spec = TensorSpec((3, 2333), torch.float16, "sliced", "special", storage_offset=4)
    text = repr(spec)
    assert len(text) < 100
    assert eval(text, {"TensorSpec": TensorSpec, "torch": torch}) == spec
    assert repr(TensorSpec((1,), torch.float32)) == "TensorSpec((1,), torch.float32)"


def test_tensor_spec_numel_and_nbytes():
    assert TensorSpec((), torch.float64).numel == 1
    assert TensorSpec((), torch.float64).nbytes == 8
    assert TensorSpec((3, 0, 5), torch.int32).numel == 0
    assert TensorSpec((3, 5), torch.complex128).nbytes == 15 * 16


@pytest.mark.parametrize(
    "args",
    [
        ((5,), torch.float32, "transposed"),
        ((5, 1), torch.float32, "transposed"),
        ((2, 0, 3), torch.float32, "transposed"),
        ((2, 3, 4), torch.float32, "channels_last"),
        ((4,), torch.float32, "sliced"),
        ((4,), torch.float32, "contiguous", "random", 3),
        ((4,), torch.float32, "diagonal"),
        ((4,), torch.float32, "contiguous", "zeros"),
        ((-1,), torch.float32),
    ],
)
def test_tensor_spec_rejects_layouts_that_cannot_hold(args):
    with pytest.raises(ValueError):
        TensorSpec(*args)


def test_tensor_specs_restrictions_are_honoured():
    strategy = fs.tensor_specs(
        dtypes=fs.dtypes(kind="int"), layouts=["transposed"], patterns=("special",), max_bytes=4096
    )

    @SOME
    @given(strategy)
    def check(spec):
        assert spec.layout == "transposed" and spec.pattern == "special"
        assert spec.dtype in fs.supported_dtypes("cpu", "int")

    check()
    with pytest.raises(InvalidArgument):
        fs.tensor_specs(layouts=["diagonal"])
    with pytest.raises(InvalidArgument):
        fs.tensor_specs(patterns=[])


# ---------------------------------------------------------------------------
# ranks


def test_rank_strategies_shrink():
    assert minimal(fs.source_ranks(5)) == 0
    assert minimal(fs.rank_subsets(5)) == (0,)
    assert minimal(fs.rank_subsets(5, min_size=3)) == (0, 1, 2)
    assert minimal(fs.world_sizes()) == 1
    assert minimal(fs.world_sizes(max_size=8, min_size=2)) == 2
    assert minimal(fs.world_sizes(), lambda w: w > 2) == 3


@MANY
@given(st.data())
def test_ranks_are_valid(data):
    world = data.draw(fs.world_sizes(max_size=8))
    assert 1 <= world <= 8
    assert 0 <= data.draw(fs.source_ranks(world)) < world
    lo = data.draw(st.integers(0, world))
    subset = data.draw(fs.rank_subsets(world, min_size=lo))
    assert subset == tuple(sorted(set(subset)))
    assert lo <= len(subset) <= world
    assert all(0 <= r < world for r in subset)


def test_rank_strategies_reject_bad_arguments():
    for bad in (
        lambda: fs.source_ranks(0),
        lambda: fs.rank_subsets(3, min_size=4),
        lambda: fs.world_sizes(max_size=1, min_size=2),
        lambda: fs.world_sizes(min_size=0),
    ):
        with pytest.raises(InvalidArgument):
            bad()


# ---------------------------------------------------------------------------
# allocator modes


def test_cpu_allocator_modes_cover_all_sharing_strategies():
    modes = set()

    @settings(max_examples=50, database=None)
    @given(fs.allocator_modes("cpu"))
    def collect(mode):
        modes.add(mode.strategy)

    collect()
    assert modes == set(mp.get_all_sharing_strategies())
    if "file_descriptor" in modes:
        assert minimal(fs.allocator_modes("cpu")) == SharingStrategyMode("file_descriptor")


@pytest.mark.parametrize("start", sorted(mp.get_all_sharing_strategies()))
@pytest.mark.parametrize("target", sorted(mp.get_all_sharing_strategies()))
def test_cpu_allocator_mode_applies_and_undoes(start, target):
    original = mp.get_sharing_strategy()
    try:
        mp.set_sharing_strategy(start)
        mode = SharingStrategyMode(target)
        with mode.applied() as active:
            assert active is mode
            assert mp.get_sharing_strategy() == target
            assert mode.is_active()
        assert mp.get_sharing_strategy() == start
        assert mode.is_active() == (start == target)
        with pytest.raises(KeyError):
            with mode.applied():
                raise KeyError("example failed")
        assert mp.get_sharing_strategy() == start
    finally:
        mp.set_sharing_strategy(original)


def test_cuda_allocator_modes_construct_without_gpu():
    assert minimal(fs.allocator_modes("cuda")) == CudaAllocatorMode()
    assert CudaAllocatorMode().settings_string() == ""
    seen = set()

    @settings(max_examples=100, database=None)
    @given(fs.allocator_modes("cuda"))
    def check(mode):
        assert isinstance(mode, CudaAllocatorMode)
        assert pickle.loads(pickle.dumps(mode)) == mode
        assert eval(repr(mode), {"CudaAllocatorMode": CudaAllocatorMode}) == mode
        for item in mode.settings_string().split(","):
            if item:
                key, value = item.split(":")
                assert key in {
                    "expandable_segments",
                    "max_split_size_mb",
                    "roundup_power2_divisions",
                    "garbage_collection_threshold",
                }
        seen.add(mode.expandable_segments)

    check()
    if hasattr(torch._C, "_accelerator_setAllocatorSettings"):
        assert seen == {None, False, True}
        assert minimal(fs.allocator_modes("cuda"), lambda m: m.expandable_segments) == CudaAllocatorMode(True)
    with pytest.raises(InvalidArgument):
        fs.allocator_modes("mps")


@pytest.mark.parametrize(
    "bad", [dict(max_split_size_mb=8), dict(roundup_power2_divisions=3), dict(garbage_collection_threshold=1.5)]
)
def test_cuda_allocator_mode_rejects_invalid_settings(bad):
    with pytest.raises(ValueError):
        CudaAllocatorMode(**bad)


class _FakeAllocatorConfig:
    """Models c10's AllocatorConfig.parseArgs: the string is re-parsed as a
    whole; split/roundup/gc fall back to defaults when absent, but
    expandable_segments keeps its previous value."""

    def __init__(self, initial: str) -> None:
        self.state = {"expandable_segments": "False"}
        self.last = ""
        self.set(initial)

    def get(self) -> str:
        return self.last

    def set(self, text: str) -> None:
        from fuzzdist.strategies._allocator import _parse_settings

        for key in ("max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold"):
            self.state.pop(key, None)
        self.state.update(_parse_settings(text))
        self.last = text


@pytest.mark.parametrize(
    "initial",
    [
        "",
        "expandable_segments:True",
        "max_split_size_mb:512",
        "roundup_power2_divisions:[256:1,512:2,>:4],garbage_collection_threshold:0.7",
    ],
)
def test_cuda_allocator_mode_applies_and_undoes_settings(monkeypatch, initial):
    fake = _FakeAllocatorConfig(initial)
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", fake.set, raising=False)
    monkeypatch.setattr(torch._C, "_accelerator_getAllocatorSettings", fake.get, raising=False)
    before = dict(fake.state)
    mode = CudaAllocatorMode(expandable_segments=True, max_split_size_mb=64, roundup_power2_divisions=4)
    with mode.applied():
        assert mode.is_active()
        assert fake.state["expandable_segments"] == "True"
        assert fake.state["max_split_size_mb"] == "64"
        for key, value in before.items():  # settings the mode doesn't touch survive
            if key not in mode.settings():
                assert fake.state[key] == value
    assert fake.get() == initial
    assert fake.state == before
    with pytest.raises(RuntimeError):
        with CudaAllocatorMode(expandable_segments=True).applied():
            raise RuntimeError("example failed")
    assert fake.state == before


@pytest.mark.skipif(
    not hasattr(torch._C, "_accelerator_getAllocatorSettings"), reason="torch has no allocator settings getter"
)
def test_cuda_allocator_mode_round_trips_through_real_torch_setter():
    getter = torch._C._accelerator_getAllocatorSettings
    before = getter()
    mode = CudaAllocatorMode(False, 64, 4, 0.5)
    with mode.applied():
        assert mode.is_active()
        assert "max_split_size_mb:64" in getter()
    assert getter() == before
    assert not CudaAllocatorMode(max_split_size_mb=64).is_active() or "max_split_size_mb:64" in before


# ---------------------------------------------------------------------------
# completion orders


def test_completion_orders_shrink_to_in_order_completion():
    for n in (0, 1, 5):
        order = minimal(fs.completion_orders(n))
        assert order.is_trivial and order.is_in_order
        assert order.steps == tuple(("complete", i) for i in range(n))
    out_of_order = minimal(fs.completion_orders(3), lambda o: not o.is_in_order)
    assert not out_of_order.failed and not out_of_order.dropped and not out_of_order.waits
    assert minimal(fs.completion_orders(3), lambda o: bool(o.failed)).steps == (
        ("complete", 0),
        ("complete", 1),
        ("fail", 2),
    )


def test_completion_orders_cover_errors_drops_and_waits():
    assert minimal(fs.completion_orders(4), lambda o: o.dropped and o.failed and o.waits and not o.is_in_order)
    pending = minimal(fs.completion_orders(3, waits_before_resolve=True), lambda o: o.has_pending_waits)
    assert pending.has_pending_waits


@MANY
@given(st.data())
def test_completion_orders_are_valid(data):
    n = data.draw(st.integers(0, 8))
    before = data.draw(st.booleans())
    allow_errors, allow_drops = data.draw(st.booleans()), data.draw(st.booleans())
    order = data.draw(
        fs.completion_orders(n, allow_errors=allow_errors, allow_drops=allow_drops, waits_before_resolve=before)
    )
    assert sorted(order.resolution_order) == list(range(n))
    assert sorted(order.completed + order.failed + order.dropped) == list(range(n))
    if not allow_errors:
        assert not order.failed
    if not allow_drops:
        assert not order.dropped
    seen: dict[int, str] = {}
    for action, index in order.steps:
        assert 0 <= index < n
        if action == "wait":
            assert seen.get(index) != "drop"
            if not before:
                assert seen.get(index) in ("complete", "fail")
        else:
            assert action in ("complete", "fail", "drop") and index not in seen
            seen[index] = action
    assert order.is_in_order == (order.resolution_order == tuple(range(n)))
    assert all(order.outcome(i) == seen[i] for i in range(n))
    assert pickle.loads(pickle.dumps(order)) == order


@pytest.mark.parametrize(
    "steps",
    [
        (("complete", 0),),  # work 1 never resolves
        (("complete", 0), ("complete", 0), ("complete", 1)),
        (("drop", 0), ("wait", 0), ("complete", 1)),
        (("complete", 0), ("complete", 2)),
        (("complete", 0), ("explode", 1)),
    ],
)
def test_completion_order_rejects_invalid_schedules(steps):
    with pytest.raises(ValueError):
        CompletionOrder(2, steps)


# ---------------------------------------------------------------------------
# DDP configs


def _ddp_signature():
    from torch.nn.parallel import DistributedDataParallel

    return inspect.signature(DistributedDataParallel.__init__)


def test_ddp_configs_shrink_to_simplest():
    config = minimal(fs.ddp_configs(world_size=3))
    assert config == DDPConfig(widths=(1, 1), batch_sizes=(1, 1, 1))
    assert config.depth == 1 and not config.is_uneven and config.steps == 1
    assert config.optimizer == "sgd" and config.ddp_kwargs() == {}
    uneven = minimal(fs.ddp_configs(world_size=2), lambda c: c.is_uneven)
    assert uneven.batch_sizes == (1, 2) and uneven.ddp_kwargs() == {}
    unused = minimal(fs.ddp_configs(world_size=2), lambda c: c.unused_parameters)
    assert unused.ddp_kwargs() == {"find_unused_parameters": True}


@MANY
@given(fs.ddp_configs(world_size=3), st.integers(0, 2**32))
def test_ddp_configs_are_valid(config, seed):
    assert config.world_size == 3 and len(config.batch_sizes) == 3
    if config.unused_parameters:
        assert config.find_unused_parameters or config.static_graph
    kwargs = config.ddp_kwargs()
    model = config.build_model(seed)
    _ddp_signature().bind(object(), model, **kwargs)  # raises TypeError if unknown
    assert "init_sync" not in kwargs or "init_sync" in _ddp_signature().parameters
    assert pickle.loads(pickle.dumps(config)) == config
    assert eval(repr(config), {"DDPConfig": DDPConfig}) == config

    names = [n for n, _ in model.named_parameters()]
    assert any(n.startswith("unused") for n in names) == config.unused_parameters
    if config.tied_parameters:
        assert model.tie_a.weight is model.tie_b.weight
    assert bool(list(model.buffers())) == config.buffers

    rank = seed % 3
    inputs, targets = config.make_batch(rank, step=0, seed=seed)
    assert inputs.shape == (config.batch_sizes[rank], config.widths[0])
    out = model(inputs)
    assert out.shape == targets.shape == (config.batch_sizes[rank], config.widths[-1])


@SOME
@given(fs.ddp_configs(world_size=2), st.integers(0, 2**32))
def test_build_model_is_deterministic(config, seed):
    rng = torch.get_rng_state()
    a = config.build_model(seed).state_dict()
    b = pickle.loads(pickle.dumps(config)).build_model(seed).state_dict()
    c = config.build_model(seed + 1).state_dict()
    assert torch.equal(rng, torch.get_rng_state())
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point() and a[k].abs().sum() > 0)
    x0, _ = config.make_batch(0, 0, seed)
    assert torch.equal(x0, config.make_batch(0, 0, seed)[0])
    if config.batch_sizes[0] == config.batch_sizes[1]:
        assert not torch.equal(x0, config.make_batch(1, 0, seed)[0])


def test_ddp_config_rejects_unsupported_combinations():
    with pytest.raises(ValueError):
        DDPConfig(unused_parameters=True)
    with pytest.raises(ValueError):
        DDPConfig(optimizer="lbfgs")
    with pytest.raises(ValueError):
        DDPConfig(batch_sizes=(2, 0))
    DDPConfig(unused_parameters=True, static_graph=True)  # supported


@pytest.fixture(scope="module")
def single_rank_group():
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(config=fs.ddp_configs(world_size=1), seed=st.integers(0, 1000))
def test_ddp_accepts_generated_configs(single_rank_group, config, seed):
    import warnings

    from torch.nn.parallel import DistributedDataParallel

    model = config.build_model(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. static_graph + find_unused_parameters advice
        ddp = DistributedDataParallel(model, **config.ddp_kwargs())
        optimizer = config.build_optimizer(ddp.parameters())
        for step in range(config.steps):
            inputs, targets = config.make_batch(0, step, seed)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
            loss.backward()
            optimizer.step()
    assert math.isfinite(loss.item())
