"""Capability probes: they answer truthfully here, and say what is missing and what to do."""

from __future__ import annotations

import importlib.util

import pytest
import rank_fns
import torch
import torch.distributed as dist

from fuzzdist import capabilities


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
