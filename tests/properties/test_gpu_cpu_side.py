"""The GPU suite's logic that a machine without a GPU can check: segment lookup, one IPC
reduction per receiver, the cupy probe, effective allocator settings, the boundary sizes, DDP's device
arguments and device-aware futures.  What needs a GPU is in test_gpu_properties_catch_bugs.py."""

from __future__ import annotations

import pickle
import sys
import types
from typing import TypeVar

import pytest
import torch
from helpers.older_torch import REFUSE_ON_OLDER_TORCH
from hypothesis import find, given, settings
from hypothesis.errors import NoSuchExample

import fuzzdist.toolkit.cuda_ipc as cuda_ipc
from fuzzdist import strategies as fst
from fuzzdist.pool.capabilities import gpu as gpu_probes
from fuzzdist.properties import cuda_ipc as ipc_property
from fuzzdist.properties import ddp
from fuzzdist.strategies import _allocator
from fuzzdist.toolkit.reorder import future_devices

MiB = 2**20

# -- CUDA IPC: the segment that holds the tensor ------------------------------------------------

SNAPSHOT = [
    {"device": 0, "address": 0x1000, "total_size": 0x1000, "is_expandable": False},
    {"device": 0, "address": 0x2000, "total_size": 0x4000, "is_expandable": True},
    {"device": 1, "address": 0x1000, "total_size": 0x8000, "is_expandable": True},
]


def test_segment_of_finds_the_segment_holding_the_pointer():
    assert cuda_ipc.segment_of(0x1000, SNAPSHOT, 0) is SNAPSHOT[0]  # first byte: inside
    assert cuda_ipc.segment_of(0x1FFF, SNAPSHOT, 0) is SNAPSHOT[0]  # last byte: inside
    assert cuda_ipc.segment_of(0x2000, SNAPSHOT, 0) is SNAPSHOT[1]  # one past the end: the next segment
    assert cuda_ipc.segment_of(0x6000, SNAPSHOT, 0) is None  # past every segment of device 0
    assert cuda_ipc.segment_of(0x1800, SNAPSHOT, 1) is SNAPSHOT[2]  # another device's segments are its own
    assert cuda_ipc.segment_of(0x1800, SNAPSHOT, 2) is None


def test_the_tensors_own_segment_decides_not_any_segment():
    # device 0 has an expandable segment, but the tensor sits in the old, non-expandable one:
    # the old check ("any segment expandable") passed this; the tensor's own segment fails it
    problem = cuda_ipc.expandable_segment_mismatch(0x1800, True, SNAPSHOT, 0)
    assert problem is not None and "is_expandable=False" in problem and "0x1800" in problem
    assert cuda_ipc.expandable_segment_mismatch(0x1800, False, SNAPSHOT, 0) is None
    # a drawn expandable_segments=False example inside a leftover expandable segment fails too
    problem = cuda_ipc.expandable_segment_mismatch(0x3000, False, SNAPSHOT, 0)
    assert problem is not None and "a non-expandable segment" in problem
    assert cuda_ipc.expandable_segment_mismatch(0x3000, True, SNAPSHOT, 0) is None


def test_a_pointer_in_no_segment_or_a_snapshot_without_the_flag_is_reported():
    assert "no segment of cuda:0" in cuda_ipc.expandable_segment_mismatch(0x9000, False, SNAPSHOT, 0)
    old = [{"device": 0, "address": 0x1000, "total_size": 0x1000}]
    assert "does not say whether" in cuda_ipc.expandable_segment_mismatch(0x1000, False, old, 0)


# -- CUDA IPC: one reduction per receiver -------------------------------------------------------


class _FakeCudaTensor:
    is_cuda = True
    device = torch.device("cuda", 0)


def test_each_receiver_gets_its_own_reduction(monkeypatch):
    from torch.multiprocessing import reductions

    calls = []

    def counting_reduce_tensor(tensor):
        calls.append(tensor)
        return (sorted, ([len(calls)],))  # picklable, and different per call, like a fresh ref counter

    monkeypatch.setattr(reductions, "reduce_tensor", counting_reduce_tensor)
    tensor = _FakeCudaTensor()
    handles = cuda_ipc.reduce_cuda_handles(tensor, [1, 2, 3])  # world size 4, source 0
    assert len(calls) == 3 and all(t is tensor for t in calls)
    assert sorted(handles) == [1, 2, 3]
    assert len({pickle.loads(h)[1][0][0] for h in handles.values()}) == 3  # three distinct reductions


def test_reduce_cuda_handles_refuses_a_cpu_tensor():
    with pytest.raises(ValueError, match="shares CUDA tensors"):
        cuda_ipc.reduce_cuda_handles(torch.zeros(1), [1])


# -- cuda_zero_copy: the cupy probe -------------------------------------------------------------------


def _fake_cupy(runtime: int, device_count_error: Exception | None = None) -> types.ModuleType:
    def get_device_count():
        if device_count_error is not None:
            raise device_count_error
        return 1

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(  # type: ignore[attr-defined]
            runtimeGetVersion=lambda: runtime, getDeviceCount=get_device_count
        )
    )
    return cupy


@pytest.mark.parametrize(
    "torch_cuda, runtime, expected",
    [
        ("13.0", 13000, None),
        ("12.8", 12040, None),
        ("13.0", 12080, "uses CUDA 12.8; install fuzzdist[gpu-cuda13]"),
        ("12.6", 13010, "uses CUDA 13.1; install fuzzdist[gpu] (cupy-cuda12x"),
        (None, 13000, "is a build without CUDA"),
    ],
)
def test_cupy_probe_matches_cuda_major_versions(monkeypatch, torch_cuda, runtime, expected):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(runtime))
    monkeypatch.setattr(torch.version, "cuda", torch_cuda)
    reason = gpu_probes.missing_cupy()
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason, reason


def test_cupy_probe_catches_any_exception_from_importing_cupy(monkeypatch, tmp_path):
    package = tmp_path / "cupy"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('CUDA driver version is insufficient')\n")
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    try:
        reason = gpu_probes.missing_cupy()
    finally:
        sys.modules.pop("cupy", None)
    assert reason is not None
    assert "RuntimeError: CUDA driver version is insufficient" in reason and "fuzzdist[gpu-cuda13]" in reason


def test_cupy_probe_reports_a_cupy_that_sees_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(13000, RuntimeError("no CUDA-capable device")))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert "can't see a GPU: no CUDA-capable device" in gpu_probes.missing_cupy()


# -- allocator modes: effective allocator settings; no garbage_collection_threshold ------------------


def test_a_mode_that_leaves_expandable_segments_unset_inherits_them():
    on, off = {"expandable_segments": "True"}, {"max_split_size_mb": "64"}
    assert fst.CudaAllocatorMode().effective_expandable_segments(on) is True
    assert fst.CudaAllocatorMode().effective_expandable_segments(off) is False  # the default is off
    assert fst.CudaAllocatorMode(expandable_segments=False).effective_expandable_segments(on) is False
    assert fst.CudaAllocatorMode(expandable_segments=True).effective_expandable_segments(off) is True


def test_inherited_settings_come_from_the_environment_without_a_getter(monkeypatch):
    monkeypatch.setattr(_allocator, "_allocator_api", lambda: None)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64,expandable_segments:True")
    assert _allocator.inherited_allocator_settings() == {"max_split_size_mb": "64", "expandable_segments": "True"}
    assert fst.CudaAllocatorMode().effective_expandable_segments() is True


def test_ipc_modes_filter_the_effective_setting_where_pidfd_getfd_is_refused(monkeypatch):
    monkeypatch.setattr(gpu_probes, "missing_pidfd_getfd", lambda: "planted: pidfd_getfd refused")
    monkeypatch.setattr(cuda_ipc, "inherited_allocator_settings", lambda: {"expandable_segments": "True"})
    modes = cuda_ipc.ipc_allocator_modes()

    @settings(max_examples=40, database=None, deadline=None)
    @given(modes)
    def no_mode_uses_expandable_segments(mode):
        # None would inherit PYTORCH_CUDA_ALLOC_CONF's expandable_segments:True: only False is left
        assert mode.expandable_segments is False

    no_mode_uses_expandable_segments()
    # with the inherited setting off, the no-change mode stays
    monkeypatch.setattr(cuda_ipc, "inherited_allocator_settings", lambda: {})
    assert find(cuda_ipc.ipc_allocator_modes(), lambda m: m.expandable_segments is None) is not None


def test_cuda_modes_never_draw_the_garbage_collection_threshold():
    with pytest.raises(NoSuchExample):
        find(
            fst.allocator_modes("cuda"),
            lambda m: m.garbage_collection_threshold is not None,
            settings=settings(max_examples=200, database=None),
        )


# -- allocator modes: allocations exactly on, below and above the allocator's boundaries -------------------


def _rounded(nbytes: int) -> int:
    """The caching allocator's rounding of a request (kMinBlockSize 512, no power-of-2 divisions)."""
    return max(512, -(-nbytes // 512) * 512)


def test_boundary_sizes_sit_one_block_below_on_and_above_each_boundary():
    sizes = ipc_property.boundary_sizes()
    assert sizes == tuple(sorted(sizes)) and sizes[0] == 8  # shrinks to the smallest allocation
    assert all(s % 8 == 0 for s in sizes)  # a whole number of elements of every drawn dtype
    for b in (MiB, 2 * MiB, 10 * MiB, 20 * MiB):
        below, on, above = b - 512, b, b + 512
        assert {below, on, above} <= set(sizes)
        assert _rounded(below) < b == _rounded(on) < _rounded(above)
    assert {8, 512, 1024} <= set(sizes)  # around the minimum block: below (8 rounds up to 512), on, above
    assert _rounded(8) == 512 < _rounded(1024)


@pytest.mark.parametrize("nbytes", ipc_property.boundary_sizes())
@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_the_allocation_is_exactly_the_drawn_size(nbytes, itemsize):
    for offset, count in [(0, 1), (4096, 3), (3, 2), (0, 3)]:
        where = ipc_property.layout(nbytes, itemsize, offset, count)
        assert where.numel_total * itemsize == nbytes  # no extra element: on the boundary itself
        assert where.views >= 1 and where.numel >= 1
        assert where.offset + where.views * where.numel <= where.numel_total  # the views lie inside
        if where.numel_total >= offset + count:
            assert (where.offset, where.views) == (offset, count)  # what fits is kept as drawn


def test_layout_refuses_a_size_that_is_not_whole_elements():
    with pytest.raises(ValueError, match="not a whole number"):
        ipc_property.layout(6, 4, 0, 1)


# -- DDP on CUDA: DDP's devices, and futures that name them --------------------------------------------


def test_ddp_device_arguments_per_rank_device():
    assert ddp.ddp_device_kwargs(torch.device("cpu")) == {}
    assert ddp.ddp_device_kwargs(torch.device("cuda", 1)) == {"device_ids": [1]}
    with pytest.raises(ValueError, match="with its index"):
        ddp.ddp_device_kwargs(torch.device("cuda"))


def test_ddp_kinds_select_the_pools_own_group_or_a_reordering_one():
    assert ddp.pg_wrapper("gloo", None) == {} == ddp.pg_wrapper("nccl", None)
    order = fst.CompletionOrder(2, (("complete", 1), ("complete", 0)))
    for kind in ("reorder-subclass", "reorder-future"):
        assert ddp.pg_wrapper(kind, order)["wrap_kwargs"]["work_form"] == kind.split("-")[1]


class _On:
    def __init__(self, device: str) -> None:
        self.device = torch.device(device)


def test_future_devices_are_the_accelerator_devices_of_the_tensors():
    assert future_devices([torch.zeros(1), torch.ones(2)]) == []  # CPU: a future with no devices
    assert future_devices([]) == []  # a barrier carries no tensor
    tensors = [_On("cuda:1"), _On("cpu"), _On("cuda:0"), _On("cuda:1")]
    assert future_devices(tensors) == [torch.device("cuda", 0), torch.device("cuda", 1)]


def test_a_reordering_groups_cpu_futures_name_no_device():
    # torch refuses a CPU device in Future(devices=...): the CPU path must keep passing none
    assert torch.futures.Future(devices=future_devices([torch.zeros(1)])).done() is False


# -- the package and the properties import and collect without CUDA or cupy ------------------------

_IMPORT_CHECK = r'''
import importlib, pkgutil, sys

attempts = []

class _WatchCupy:
    """Records every attempt to import cupy (the probe would swallow an error raised here)."""
    def find_spec(self, name, path=None, target=None):
        if name == "cupy" or name.startswith("cupy."):
            attempts.append(name)
        return None

sys.meta_path.insert(0, _WatchCupy())
import torch
import fuzzdist, fuzzdist.toolkit.cuda_ipc, fuzzdist.properties
for info in pkgutil.iter_modules(fuzzdist.properties.__path__):
    name = f"fuzzdist.properties.{info.name}"
    try:
        importlib.import_module(name)
    except ImportError as exc:
        # A module's own refusal of the installed torch (REFUSE_ON_OLDER_TORCH) is said; any other fails.
        tb = exc.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        if (name not in __REFUSE__ or type(exc) is not ImportError or tb.tb_frame.f_globals.get("__name__") != name
                or not str(exc).startswith(f"torch {torch.__version__}")):
            raise
        print(f"REFUSED {name}: {exc}")
import pytest
rc = pytest.main(sys.argv[1:])
print("CUPY IMPORTS:", attempts)
print("CUDA INITIALIZED:", torch.cuda.is_initialized())
sys.exit(int(rc))
'''


def test_nothing_gpu_only_is_imported_and_cuda_variants_skip_with_the_reason():
    """fuzzdist, every property module and every property test import and collect without touching
    cupy or initializing CUDA.  Without a GPU, every CUDA variant (``-m gpu``) skips, saying why."""
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    gpu = torch.cuda.is_available()
    # with a GPU, only collect (running -m gpu there is docs/gpu-run.md's job)
    args = ["--collect-only", "-q"] if gpu else ["-m", "gpu", "-v", "-rs"]
    script = _IMPORT_CHECK.replace("__REFUSE__", repr(set(REFUSE_ON_OLDER_TORCH)))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "properties/",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",
            *args,
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "CUPY IMPORTS: []" in out, out[-4000:]
    assert "CUDA INITIALIZED: False" in out, out[-4000:]
    if not gpu:
        results = [line for line in out.splitlines() if line.startswith("properties/") and "::" in line]
        assert results and all(" SKIPPED" in line for line in results), out[-4000:]
        refused = dict(
            line.removeprefix("REFUSED ").split(": ", 1) for line in out.splitlines() if line.startswith("REFUSED ")
        )
        refusals = {REFUSE_ON_OLDER_TORCH[name]: why for name, why in refused.items()}

        def said(line: str) -> bool:
            """'SKIPPED [n] FILE:LINE: WHY': a CUDA variant needs CUDA; a refused module's property file skips
            whole in the module's own words; any other skip says what the installed torch lacks, naming it."""
            where, why = line.split("] ", 1)[-1].split(": ", 1)
            file = where.rsplit(":", 1)[0]
            if file in refusals:
                return why == refusals[file]
            return "needs CUDA" in why or f"torch {torch.__version__}" in why

        reasons = [line for line in out.splitlines() if line.startswith("SKIPPED [")]
        assert reasons and all(said(line) for line in reasons), "\n".join(reasons)
        for name in (
            "test_cuda_ipc_sees_writes[cuda-w4]",
            "test_cuda_zero_copy_cupy[cuda-w2]",
            "test_blocked_stream_waits_for_every_work[cuda-w2]",
            "test_ddp_gradients_match_local[cuda-w2-reorder-future]",
            "test_ddp_gradients_match_local_nccl[cuda-w2-nccl-nccl]",
        ):
            assert any(f"::{name} SKIPPED" in line for line in results), f"{name} not collected as a skipped variant"
        assert not any("[cpu-" in line for line in results)  # -m gpu selects the CUDA variants only


def test_each_reordered_works_future_is_made_with_its_tensors_devices(monkeypatch):
    """The wiring, checked on CPU: a Work's future is built with ``devices=future_devices(its tensors)``
    (a CUDA torch needs that to synchronize streams; a CPU torch refuses CUDA devices, so faked here)."""
    from fuzzdist.toolkit import reorder

    made = []
    real_future = torch.futures.Future
    T = TypeVar("T")

    class RecordingFuture(real_future[T]):  # generic, as torch.futures subscripts its Future in then()
        def __init__(self, *, devices=None):
            made.append(devices)
            super().__init__()

    monkeypatch.setattr(torch.futures, "Future", RecordingFuture)
    monkeypatch.setattr(reorder, "future_devices", lambda tensors: [f"devices of {len(tensors)} tensors"])
    entry = reorder._Entry(0, "allreduce", None, lambda: None, [torch.zeros(2), torch.zeros(3)])
    assert made == [["devices of 2 tensors"]]
    entry.source.set_result(entry.result)
    assert entry.future.wait()[1].shape == (3,)  # the chained future the caller holds carries the result
