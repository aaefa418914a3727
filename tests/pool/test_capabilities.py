"""Capability probes: they answer truthfully here, and say what is missing and what to do."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
import torch.distributed as dist
from helpers import rank_fns

from fuzzdist.pool import capabilities


def test_gloo_dtypes_match_the_installed_gloo(rank_pool):
    candidates = ["float32", "float64", "float16", "bfloat16", "complex64", "complex128", "int8", "int16",
                  "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn"]
    candidates = [n for n in candidates if hasattr(torch, n)]
    accepted = rank_pool.run(rank_fns.gloo_accepts, candidates)[0]
    declared = {str(d).removeprefix("torch.") for d in capabilities.GLOO_DTYPES}
    assert {n for n, ok in accepted.items() if ok} == declared


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


def test_block_current_stream_probe(monkeypatch):
    assert capabilities.missing_block_current_stream() is None  # torch 2.13 has it
    monkeypatch.delattr(dist.distributed_c10d.Work, "block_current_stream")
    assert "block_current_stream" in capabilities.missing_block_current_stream()


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed")
def test_cupy_probe_says_how_to_install():
    assert "install fuzzdist[gpu]" in capabilities.missing_cupy()


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
    if torch.cuda.is_available():
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(["*needs CUDA*"])


@pytest.mark.parametrize("probe, module", [
    (capabilities.missing_fully_shard, "torch.distributed.fsdp"),
    (capabilities.missing_functional_collectives, "torch.distributed._functional_collectives"),
    (capabilities.missing_distributed_nn, "torch.distributed.nn"),
])
def test_torch_feature_probes(monkeypatch, probe, module):
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
