"""Capability probes: they answer truthfully here, and say what is missing and what to do."""

from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest
import torch
import torch.distributed as dist

from fuzzdist.pool.capabilities import gloo, gpu, probes, torch_features

CANDIDATES = [
    n
    for n in (
        "float32",
        "float64",
        "float16",
        "bfloat16",
        "complex64",
        "complex128",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
        "float8_e4m3fn",
    )
    if hasattr(torch, n)
]


def _names(dtypes) -> set[str]:
    return {str(d).removeprefix("torch.") for d in dtypes}


def takes(ctx, api, dtype_names):
    """On every rank of a world of 2: for each dtype name, does ``api`` carry a tensor of it over gloo?"""
    import torch.distributed._functional_collectives as fc

    def send_recv(t):
        if ctx.rank == 0:
            dist.send(t, 1, group=ctx.group)
        elif ctx.rank == 1:
            dist.recv(t, 0, group=ctx.group)

    def dtensor(t):
        from fuzzdist.properties import dtensor as prop  # its DTensor API (public or private) and meshes

        mesh = prop.device_mesh("cpu", (ctx.world_size,))
        shard, replicate = [prop.API.Shard(0)], [prop.API.Replicate()]
        prop.API.distribute_tensor(t, mesh, shard).redistribute(mesh, replicate).full_tensor()

    call = {
        "p2p": send_recv,
        "dtensor": dtensor,
        "broadcast": lambda t: dist.broadcast(t, 0, group=ctx.group),
        "functional": lambda t: fc.wait_tensor(fc.all_reduce(t, "sum", ctx.group)),
    }[api]
    out = {}
    for name in dtype_names:
        try:
            call(torch.zeros(2 * ctx.world_size, dtype=getattr(torch, name)))
            out[name] = True
        except (RuntimeError, ValueError, TypeError):
            out[name] = False
    return out


def _taken_at_world_size_2(rank_pool, api) -> set[str]:
    answers = rank_pool.run(takes, api, CANDIDATES)
    assert answers[0] == answers[1]  # the same answer on both ranks
    return {n for n, ok in answers[0].items() if ok}


@pytest.mark.parametrize("api", gloo.GLOO_APIS)
def test_gloo_dtypes_is_what_the_installed_gloo_takes_at_world_size_2(rank_pool, api):
    """The probe runs at world size 1 in a subprocess; a property's ranks are 2 or more."""
    taken = _taken_at_world_size_2(rank_pool, api)
    assert _names(gloo.gloo_dtypes(api)) == taken & _names(gloo.GLOO_DTYPES)
    # GLOO_DTYPES leaves out nothing gloo takes, and adds nothing but complex (which torch 2.6.0 refuses)
    assert taken <= _names(gloo.GLOO_DTYPES)
    assert _names(gloo.GLOO_DTYPES) - taken <= {"complex64", "complex128"}


def test_send_recv_carries_every_gloo_dtype(rank_pool):
    """The p2p property draws all of GLOO_DTYPES, on every torch."""
    assert _names(gloo.GLOO_DTYPES) <= _taken_at_world_size_2(rank_pool, "p2p")


def test_a_wrong_probe_answer_is_caught(rank_pool, monkeypatch):
    """A probe that misses a dtype gloo takes fails the comparison above (one that claims a dtype outside
    GLOO_DTYPES can't: gloo_dtypes answers within it, and GLOO_DTYPES is checked against gloo there)."""
    taken = _taken_at_world_size_2(rank_pool, "broadcast")
    monkeypatch.setattr(gloo, "_probe_gloo_dtypes", lambda: {"broadcast": sorted(taken - {"int8"})})
    gloo.gloo_dtypes.cache_clear()
    try:
        assert _names(gloo.gloo_dtypes("broadcast")) != taken & _names(gloo.GLOO_DTYPES)
    finally:
        gloo.gloo_dtypes.cache_clear()


# A module that runs and prints no answer: a broken probe, seen from outside.
NOT_A_PROBE = "platform"


def _clear_probe_caches():
    gloo.gloo_dtypes.cache_clear()
    gloo.gloo_reduce_ops.cache_clear()
    gloo.functional_layouts.cache_clear()
    gloo._probe_gloo.cache_clear()


def test_gloo_dtypes_without_an_answer_warns_and_draws_everything(monkeypatch):
    _clear_probe_caches()
    monkeypatch.setattr(gloo, "PROBE_MODULE", NOT_A_PROBE)
    try:
        with pytest.warns(
            UserWarning,
            match=r"could not ask torch .* which dtypes gloo's broadcast takes "
            r"\(python -m platform printed no answer.*drawing every dtype",
        ) as caught:
            assert gloo.gloo_dtypes("broadcast") == gloo.GLOO_DTYPES
        assert caught[0].filename == __file__  # the warning names the line that asked, not gloo.py
    finally:
        _clear_probe_caches()


def test_gloo_dtypes_of_an_unknown_api_is_an_error():
    with pytest.raises(ValueError, match="unknown API 'nccl_magic' for gloo_dtypes; known: broadcast"):
        gloo.gloo_dtypes("nccl_magic")


def reduces(ctx, api, dtype_names, ops):
    """On every rank of a world of 2: for each dtype name, the ReduceOps ``api`` takes over gloo for it."""
    import torch.distributed._functional_collectives as fc

    reduce_scatter = getattr(fc, "reduce_scatter_single", None) or fc.reduce_scatter_tensor

    def c10d_reduce_scatter(t, op):  # as the functional property calls it
        c10d = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        c10d(torch.empty(2, dtype=t.dtype), t, op=getattr(dist.ReduceOp, op), group=ctx.group)

    call = {
        "all_reduce": lambda t, op: dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=ctx.group),
        "reduce": lambda t, op: dist.reduce(t, 0, op=getattr(dist.ReduceOp, op), group=ctx.group),
        "functional": lambda t, op: fc.wait_tensor(fc.all_reduce(t, op.lower(), ctx.group)),
        "reduce_scatter_tensor": c10d_reduce_scatter,
        "functional_reduce_scatter": lambda t, op: fc.wait_tensor(reduce_scatter(t, op.lower(), 0, ctx.group)),
    }[api]
    out = {}
    for name in dtype_names:
        out[name] = []
        for op in ops:
            try:
                call(torch.zeros(2 * ctx.world_size, dtype=getattr(torch, name)), op)
                out[name].append(op)
            except (RuntimeError, ValueError, TypeError):
                pass
    return out


def _reduced_at_world_size_2(rank_pool, api) -> dict[str, set[str]]:
    names = sorted(_names(gloo.GLOO_DTYPES))
    answers = rank_pool.run(reduces, api, names, list(gloo.GLOO_REDUCE_OPS))
    assert answers[0] == answers[1]  # the same answer on both ranks
    return {name: set(ops) for name, ops in answers[0].items()}


def _probe_answer(api) -> dict[str, set[str]]:
    return {str(d).removeprefix("torch."): set(gloo.gloo_reduce_ops(api, d)) for d in gloo.GLOO_DTYPES}


@pytest.mark.parametrize("api", gloo.GLOO_REDUCE_APIS)
def test_gloo_reduce_ops_is_what_the_installed_gloo_takes_at_world_size_2(rank_pool, api):
    """The ReduceOps probe runs at world size 1 in a subprocess; a property's ranks are 2 or more."""
    assert _probe_answer(api) == _reduced_at_world_size_2(rank_pool, api)


def test_the_reduce_scatter_forms_take_every_op_the_functional_property_draws(rank_pool):
    """The functional property draws reduce_ops(dtype) for reduce_scatter too, and compares it with c10d's
    reduce_scatter_tensor: both must take what the all_reduce probe answered (a superset, at a world of 2)."""
    from fuzzdist.properties import functional

    for api in ("reduce_scatter_tensor", "functional_reduce_scatter"):
        taken = _reduced_at_world_size_2(rank_pool, api)
        for dtype in gloo.gloo_dtypes("functional"):
            assert set(functional.reduce_ops(dtype)) <= taken[str(dtype).removeprefix("torch.")], (api, dtype)


@pytest.mark.parametrize("wrong", ["one left out", "one gloo refuses"])
def test_a_wrong_reduce_ops_answer_is_caught(rank_pool, monkeypatch, wrong):
    """A probe that misses an op gloo takes, or claims one it refuses, fails the comparison above."""
    taken = _reduced_at_world_size_2(rank_pool, "all_reduce")
    planted = {name: sorted(ops) for name, ops in taken.items()}
    if wrong == "one left out":
        planted["float32"].remove("PRODUCT")
    else:
        planted["float32"].append("BAND")  # bitwise over a floating dtype: every gloo refuses it
    monkeypatch.setattr(gloo, "_probe_gloo_reduce_ops", lambda: {"all_reduce": planted})
    gloo.gloo_reduce_ops.cache_clear()
    try:
        assert _probe_answer("all_reduce") != _reduced_at_world_size_2(rank_pool, "all_reduce")
    finally:
        gloo.gloo_reduce_ops.cache_clear()


def test_gloo_reduce_ops_without_an_answer_warns_and_draws_what_gloo_took_on_2_13(monkeypatch):
    _clear_probe_caches()
    monkeypatch.setattr(gloo, "PROBE_MODULE", NOT_A_PROBE)
    try:
        with pytest.warns(
            UserWarning,
            match=r"could not ask torch .* which ReduceOps gloo's all_reduce takes "
            r"\(python -m platform printed no answer.*"
            r"drawing the ones gloo took on torch 2.13",
        ):
            assert gloo.gloo_reduce_ops("all_reduce", torch.float32) == ("SUM", "AVG", "PRODUCT", "MIN", "MAX")
        with pytest.warns(UserWarning):
            assert gloo.gloo_reduce_ops("functional", torch.complex64) == ("SUM", "AVG")
        with pytest.warns(UserWarning):
            assert gloo.gloo_reduce_ops("reduce", torch.int8)[-3:] == ("BAND", "BOR", "BXOR")
    finally:
        _clear_probe_caches()


def test_gloo_reduce_ops_of_an_unknown_api_or_dtype_is_an_error():
    with pytest.raises(ValueError, match="unknown API 'nccl_magic' for gloo_reduce_ops; known: all_reduce"):
        gloo.gloo_reduce_ops("nccl_magic", torch.float32)
    with pytest.raises(ValueError, match="gloo_reduce_ops takes a torch.dtype, got 'float32'"):
        gloo.gloo_reduce_ops("all_reduce", "float32")


def functional_takes(ctx, layouts):
    """On every rank of a world of 2: for each functional collective the installed torch has, the layouts
    (of ``layouts``) it takes as its input over gloo."""
    import torch.distributed._functional_collectives as fc

    from fuzzdist.strategies import TensorSpec

    def issue(op, t):
        fn = getattr(fc, op)
        if op == "all_reduce":
            return fn(t, "sum", ctx.group)
        if op.startswith("all_gather"):
            return fn(t, 0, ctx.group)
        if op.startswith("reduce_scatter"):
            return fn(t, "sum", 0, ctx.group)
        if op == "broadcast":
            return fn(t, 0, ctx.group)
        return fn(t, None, None, ctx.group)

    out = {}
    for op in gloo.FUNCTIONAL_OPS:
        if not hasattr(fc, op):
            continue
        out[op] = []
        for layout in layouts:
            t = TensorSpec(
                (2 * ctx.world_size, 2, 2, 2), torch.float32, layout, "random", 1 if layout == "sliced" else 0
            ).materialize("cpu", 0)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)  # the deprecated *_tensor aliases say so
                    fc.wait_tensor(issue(op, t))
                out[op].append(layout)
            except (RuntimeError, ValueError, TypeError, AssertionError):
                pass
    return out


def _functional_layouts_at_world_size_2(rank_pool) -> dict[str, tuple[str, ...]]:
    answers = rank_pool.run(functional_takes, list(gloo.FUNCTIONAL_LAYOUTS))
    assert answers[0] == answers[1]  # the same answer on both ranks
    return {op: tuple(layouts) for op, layouts in answers[0].items()}


def test_functional_layouts_is_what_the_installed_torch_takes_at_world_size_2(rank_pool):
    """The layouts probe runs at world size 1 in a subprocess; a property's ranks are 2 or more."""
    from fuzzdist.strategies import LAYOUTS

    assert gloo.FUNCTIONAL_LAYOUTS == LAYOUTS  # every layout the strategies draw is asked about
    taken = _functional_layouts_at_world_size_2(rank_pool)
    assert {op: gloo.functional_layouts(op) for op in taken} == taken


def test_a_wrong_functional_layouts_answer_is_caught(rank_pool, monkeypatch):
    """A probe that misses a layout the op takes fails the comparison above; so does one that claims a
    layout the op refuses (torch 2.6.0's all_gather_tensor asserts a contiguous input)."""
    taken = _functional_layouts_at_world_size_2(rank_pool)
    planted = {op: list(layouts) for op, layouts in taken.items()}
    planted["all_reduce"].remove("sliced")
    for op in planted:
        if "transposed" not in planted[op]:  # an op refusing a layout: claim it takes it
            planted[op].append("transposed")
    monkeypatch.setattr(gloo, "_probe_gloo", lambda: {"functional_layouts": planted})
    gloo.functional_layouts.cache_clear()
    try:
        answer = {op: gloo.functional_layouts(op) for op in taken}
        assert answer["all_reduce"] != taken["all_reduce"]
        assert all(answer[op] != taken[op] for op in taken if "transposed" not in taken[op])
    finally:
        gloo.functional_layouts.cache_clear()


def test_functional_layouts_without_an_answer_warns_and_draws_every_layout(monkeypatch):
    _clear_probe_caches()
    monkeypatch.setattr(gloo, "PROBE_MODULE", NOT_A_PROBE)
    try:
        with pytest.warns(
            UserWarning,
            match=r"could not ask torch .* which layouts its functional all_reduce "
            r"takes \(python -m platform printed no answer.*drawing every layout",
        ):
            assert gloo.functional_layouts("all_reduce") == gloo.FUNCTIONAL_LAYOUTS
    finally:
        _clear_probe_caches()
    with pytest.raises(ValueError, match="unknown functional collective 'all_gather' for functional_layouts"):
        gloo.functional_layouts("all_gather")


def test_the_properties_draw_what_the_probe_answers():
    from hypothesis import given, settings

    from fuzzdist.properties import broadcast, dtensor, functional

    seen: dict[str, set] = {"broadcast": set(), "functional": set(), "dtensor": set()}

    reductions: set[tuple[torch.dtype, str]] = set()
    layouts: set[tuple[str, str]] = set()

    @settings(max_examples=150, database=None, deadline=None)
    @given(b=broadcast.SPECS, f=functional.functional_cases(2), d=dtensor.roundtrips(2))
    def draw(b, f, d):
        seen["broadcast"].add(b.dtype)
        seen["functional"].update(call.spec.dtype for call in f.calls)
        seen["dtensor"].add(d.spec.dtype)
        reductions.update(
            (call.spec.dtype, call.reduce_op)
            for call in f.calls
            if call.op in ("all_reduce", "reduce_scatter_single", "reduce_scatter_tensor")
        )
        layouts.update((call.op, call.spec.layout) for call in f.calls)

    draw()
    for api, dtypes in seen.items():
        assert dtypes <= set(gloo.gloo_dtypes(api)), api
    for dtype, op in reductions:  # the functional all_reduce and c10d's, which it is compared with
        assert op in gloo.gloo_reduce_ops("functional", dtype), (dtype, op)
        assert op in gloo.gloo_reduce_ops("all_reduce", dtype), (dtype, op)
    assert any(op != "SUM" for _, op in reductions)  # the ops are drawn, not only SUM
    for op, layout in layouts:
        assert layout in gloo.functional_layouts(op), (op, layout)
    assert any(layout != "contiguous" for _, layout in layouts)  # the layouts are drawn, not only contiguous


def test_pidfd_probe_answers(monkeypatch):
    gpu.missing_pidfd_getfd.cache_clear()
    try:
        answer = gpu.missing_pidfd_getfd()
        assert answer is None or "pidfd" in answer
        # A machine that refuses: the reason names the syscall, the error and the way out.
        monkeypatch.setattr(gpu, "_PIDFD_PROBE", "print('pidfd_getfd Operation not permitted')")
        gpu.missing_pidfd_getfd.cache_clear()
        refused = gpu.missing_pidfd_getfd()
        assert "pidfd_getfd Operation not permitted" in refused and "SYS_PTRACE" in refused
    finally:
        gpu.missing_pidfd_getfd.cache_clear()


HAS_BLOCK_CURRENT_STREAM = hasattr(dist.distributed_c10d.Work, "block_current_stream")  # not in torch 2.6


def test_block_current_stream_probe(monkeypatch):
    if HAS_BLOCK_CURRENT_STREAM:
        assert torch_features.missing_block_current_stream() is None
        monkeypatch.delattr(dist.distributed_c10d.Work, "block_current_stream")
    reason = torch_features.missing_block_current_stream()
    assert "block_current_stream" in reason and torch.__version__ in reason


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed")
def test_cupy_probe_says_how_to_install():
    # the extra for torch's CUDA: fuzzdist[gpu] for a CPU or CUDA 12 torch, fuzzdist[gpu-cuda13] for CUDA 13
    extra = {13: "gpu-cuda13"}.get(gpu._torch_cuda_major(), "gpu")
    assert f"install fuzzdist[{extra}]" in gpu.missing_cupy()


def test_unknown_capability_is_an_error():
    with pytest.raises(ValueError, match="unknown capabilities.*known: cuda"):
        probes.missing("warp_drive")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the reasons on a machine without a GPU")
def test_gpu_probes_without_a_gpu():
    for reason in (gpu.missing_expandable_segments(), gpu.missing_peer_access(2), probes.missing("cuda")):
        assert reason.startswith("needs CUDA")


def test_needs_marker_skips_with_the_probe_reason(pytester):
    pytester.makepyfile(
        test_x="""
import pytest
@pytest.mark.needs("block_current_stream")
def test_has():
    pass
@pytest.mark.needs("cuda")
def test_cuda():
    pass
"""
    )
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    missing = [] if HAS_BLOCK_CURRENT_STREAM else ["*needs Work.block_current_stream*"]
    missing += [] if torch.cuda.is_available() else ["*needs CUDA*"]
    result.assert_outcomes(passed=2 - len(missing), skipped=len(missing))
    result.stdout.fnmatch_lines(missing)


def test_fully_shard_needs_a_cpu_stream_with_record_event(monkeypatch):
    """torch 2.6's fully_shard fails on CPU ranks ('Stream' object has no attribute 'record_event'): skipped."""
    if hasattr(torch.cpu.Stream, "record_event"):
        assert torch_features.missing_fully_shard() is None
        monkeypatch.delattr(torch.cpu.Stream, "record_event")
    reason = torch_features.missing_fully_shard()
    assert reason and "CPU ranks" in reason and "record_event" in reason and torch.__version__ in reason


@pytest.mark.parametrize(
    "probe, module",
    [
        (torch_features.missing_fully_shard, "torch.distributed.fsdp"),
        (torch_features.missing_functional_collectives, "torch.distributed._functional_collectives"),
        (torch_features.missing_distributed_nn, "torch.distributed.nn"),
    ],
)
def test_torch_feature_probes(monkeypatch, probe, module):
    if probe is torch_features.missing_fully_shard and not hasattr(torch.cpu.Stream, "record_event"):
        monkeypatch.setattr(torch.cpu.Stream, "record_event", None, raising=False)  # torch 2.6: see above
    assert probe() is None  # every torch fuzzdist is tested with has them
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    reason = probe()
    assert reason and module.rsplit(".", 1)[0] in reason and torch.__version__ in reason, reason


PROPERTY_FILES = [
    ("properties/test_fsdp_parity.py", "fsdp"),
    ("tests/properties/test_fsdp_parity_catch_bugs.py", "fsdp"),
    ("properties/test_functional_collectives.py", "functional"),
    ("tests/properties/test_functional_collectives_catch_bugs.py", "functional"),
]


@pytest.mark.parametrize("path, module", PROPERTY_FILES)
def test_a_property_file_skips_only_for_a_missing_torch_feature(monkeypatch, path, module):
    """Its gate is the capability probe: an ImportError inside fuzzdist fails, it is not skipped away."""
    from pathlib import Path

    file = Path(__file__).resolve().parents[2] / path
    import fuzzdist.properties

    # importing it raises ImportError: None in sys.modules, and no attribute left on the package from an
    # earlier import in this session (`from fuzzdist.properties import fsdp` would take that instead)
    monkeypatch.setitem(sys.modules, f"fuzzdist.properties.{module}", None)
    monkeypatch.delattr(fuzzdist.properties, module, raising=False)
    spec = importlib.util.spec_from_file_location(f"gate_{module}", file)
    assert spec is not None and spec.loader is not None
    with pytest.raises(ImportError):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    probe = "missing_fully_shard" if module == "fsdp" else "missing_functional_collectives"
    monkeypatch.setattr(torch_features, probe, lambda: "planted: this torch has no such thing")
    monkeypatch.setitem(sys.modules, f"fuzzdist.properties.{module}", None)
    with pytest.raises(pytest.skip.Exception, match="planted: this torch has no such thing"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_the_package_keeps_the_public_names_the_api_page_documents():
    """docs/api.md documents fuzzdist.pool.capabilities' public names; the package exports those, and
    the rest lives in the module of its question."""
    import re
    from pathlib import Path

    import fuzzdist.pool.capabilities as public

    api = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    row = next(line for line in api.splitlines() if line.startswith("| `fuzzdist.pool.capabilities` |"))
    named = set(re.findall(r"`(\w+)(?:\([^`]*\))?`", row.split("|")[2]))
    documented = {name for name in named if not name.endswith("Error")}  # the error is fuzzdist.errors'
    assert documented == set(public.__all__)
    assert all(callable(getattr(public, name)) or name == "PROBES" for name in public.__all__)
