"""Capability probes: they answer truthfully here, and say what is missing and what to do."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
import torch.distributed as dist

from fuzzdist.pool import capabilities

CANDIDATES = [n for n in ("float32", "float64", "float16", "bfloat16", "complex64", "complex128", "int8", "int16",
                           "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn")
              if hasattr(torch, n)]


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

    call = {"p2p": send_recv, "dtensor": dtensor,
            "broadcast": lambda t: dist.broadcast(t, 0, group=ctx.group),
            "functional": lambda t: fc.wait_tensor(fc.all_reduce(t, "sum", ctx.group))}[api]
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


@pytest.mark.parametrize("api", capabilities.GLOO_APIS)
def test_gloo_dtypes_is_what_the_installed_gloo_takes_at_world_size_2(rank_pool, api):
    """The probe runs at world size 1 in a subprocess; a property's ranks are 2 or more."""
    taken = _taken_at_world_size_2(rank_pool, api)
    assert _names(capabilities.gloo_dtypes(api)) == taken & _names(capabilities.GLOO_DTYPES)
    # GLOO_DTYPES leaves out nothing gloo takes, and adds nothing but complex (which torch 2.6.0 refuses)
    assert taken <= _names(capabilities.GLOO_DTYPES)
    assert _names(capabilities.GLOO_DTYPES) - taken <= {"complex64", "complex128"}


def test_send_recv_carries_every_gloo_dtype(rank_pool):
    """The p2p property draws all of GLOO_DTYPES, on every torch."""
    assert _names(capabilities.GLOO_DTYPES) <= _taken_at_world_size_2(rank_pool, "p2p")


def test_a_wrong_probe_answer_is_caught(rank_pool, monkeypatch):
    """A probe that misses a dtype gloo takes fails the comparison above (one that claims a dtype outside
    GLOO_DTYPES can't: gloo_dtypes answers within it, and GLOO_DTYPES is checked against gloo there)."""
    taken = _taken_at_world_size_2(rank_pool, "broadcast")
    monkeypatch.setattr(capabilities, "_probe_gloo_dtypes", lambda: {"broadcast": sorted(taken - {"int8"})})
    capabilities.gloo_dtypes.cache_clear()
    try:
        assert _names(capabilities.gloo_dtypes("broadcast")) != taken & _names(capabilities.GLOO_DTYPES)
    finally:
        capabilities.gloo_dtypes.cache_clear()


def test_gloo_dtypes_without_an_answer_warns_and_draws_everything(monkeypatch):
    capabilities.gloo_dtypes.cache_clear()
    capabilities._probe_gloo_dtypes.cache_clear()
    monkeypatch.setattr(capabilities, "_GLOO_DTYPES_PROBE", "print('not json')")
    try:
        with pytest.warns(UserWarning, match=r"could not ask torch .* which dtypes gloo's broadcast takes "
                                             r"\(JSONDecodeError.*drawing every dtype"):
            assert capabilities.gloo_dtypes("broadcast") == capabilities.GLOO_DTYPES
    finally:
        capabilities.gloo_dtypes.cache_clear()
        capabilities._probe_gloo_dtypes.cache_clear()


def test_gloo_dtypes_of_an_unknown_api_is_an_error():
    with pytest.raises(ValueError, match="unknown API 'nccl_magic' for gloo_dtypes; known: broadcast"):
        capabilities.gloo_dtypes("nccl_magic")


def test_the_properties_draw_what_the_probe_answers():
    from hypothesis import given, settings

    from fuzzdist.properties import broadcast, dtensor, functional

    seen: dict[str, set] = {"broadcast": set(), "functional": set(), "dtensor": set()}

    @settings(max_examples=150, database=None, deadline=None)
    @given(b=broadcast.SPECS, f=functional.functional_cases(2), d=dtensor.roundtrips(2))
    def draw(b, f, d):
        seen["broadcast"].add(b.dtype)
        seen["functional"].update(call.spec.dtype for call in f.calls)
        seen["dtensor"].add(d.spec.dtype)

    draw()
    for api, dtypes in seen.items():
        assert dtypes <= set(capabilities.gloo_dtypes(api)), api


def test_pidfd_probe_answers(monkeypatch):
    capabilities.missing_pidfd_getfd.cache_clear()
    try:
        answer = capabilities.missing_pidfd_getfd()
        assert answer is None or "pidfd" in answer
        # A machine that refuses: the reason names the syscall, the error and the way out.
        monkeypatch.setattr(capabilities, "_PIDFD_PROBE", "print('pidfd_getfd Operation not permitted')")
        capabilities.missing_pidfd_getfd.cache_clear()
        refused = capabilities.missing_pidfd_getfd()
        assert "pidfd_getfd Operation not permitted" in refused and "SYS_PTRACE" in refused
    finally:
        capabilities.missing_pidfd_getfd.cache_clear()


HAS_BLOCK_CURRENT_STREAM = hasattr(dist.distributed_c10d.Work, "block_current_stream")  # not in torch 2.6


def test_block_current_stream_probe(monkeypatch):
    if HAS_BLOCK_CURRENT_STREAM:
        assert capabilities.missing_block_current_stream() is None
        monkeypatch.delattr(dist.distributed_c10d.Work, "block_current_stream")
    reason = capabilities.missing_block_current_stream()
    assert "block_current_stream" in reason and torch.__version__ in reason


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed")
def test_cupy_probe_says_how_to_install():
    # the extra for torch's CUDA: fuzzdist[gpu] for a CPU or CUDA 12 torch, fuzzdist[gpu-cuda13] for CUDA 13
    extra = {13: "gpu-cuda13"}.get(capabilities._torch_cuda_major(), "gpu")
    assert f"install fuzzdist[{extra}]" in capabilities.missing_cupy()


def test_unknown_capability_is_an_error():
    with pytest.raises(ValueError, match="unknown capabilities.*known: cuda"):
        capabilities.missing("warp_drive")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the reasons on a machine without a GPU")
def test_gpu_probes_without_a_gpu():
    for reason in (capabilities.missing_expandable_segments(), capabilities.missing_peer_access(2),
                   capabilities.missing("cuda")):
        assert reason.startswith("needs CUDA")


def test_needs_marker_skips_with_the_probe_reason(pytester):
    pytester.makepyfile(test_x='''
import pytest
@pytest.mark.needs("block_current_stream")
def test_has():
    pass
@pytest.mark.needs("cuda")
def test_cuda():
    pass
''')
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    missing = [] if HAS_BLOCK_CURRENT_STREAM else ["*needs Work.block_current_stream*"]
    missing += [] if torch.cuda.is_available() else ["*needs CUDA*"]
    result.assert_outcomes(passed=2 - len(missing), skipped=len(missing))
    result.stdout.fnmatch_lines(missing)


def test_fully_shard_needs_a_cpu_stream_with_record_event(monkeypatch):
    """torch 2.6's fully_shard fails on CPU ranks ('Stream' object has no attribute 'record_event'): skipped."""
    if hasattr(torch.cpu.Stream, "record_event"):
        assert capabilities.missing_fully_shard() is None
        monkeypatch.delattr(torch.cpu.Stream, "record_event")
    reason = capabilities.missing_fully_shard()
    assert reason and "CPU ranks" in reason and "record_event" in reason and torch.__version__ in reason


@pytest.mark.parametrize("probe, module", [
    (capabilities.missing_fully_shard, "torch.distributed.fsdp"),
    (capabilities.missing_functional_collectives, "torch.distributed._functional_collectives"),
    (capabilities.missing_distributed_nn, "torch.distributed.nn"),
])
def test_torch_feature_probes(monkeypatch, probe, module):
    if probe is capabilities.missing_fully_shard and not hasattr(torch.cpu.Stream, "record_event"):
        monkeypatch.setattr(torch.cpu.Stream, "record_event", None, raising=False)  # torch 2.6: see above
    assert probe() is None  # every torch fuzzdist is tested with has them
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    reason = probe()
    assert reason and module.rsplit(".", 1)[0] in reason and torch.__version__ in reason, reason


PROPERTY_FILES = [("properties/test_fsdp_parity.py", "fsdp"),
                  ("tests/properties/test_fsdp_parity_catch_bugs.py", "fsdp"),
                  ("properties/test_functional_collectives.py", "functional"),
                  ("tests/properties/test_functional_collectives_catch_bugs.py", "functional")]


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
    monkeypatch.setattr(capabilities, probe, lambda: "planted: this torch has no such thing")
    monkeypatch.setitem(sys.modules, f"fuzzdist.properties.{module}", None)
    with pytest.raises(pytest.skip.Exception, match="planted: this torch has no such thing"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
