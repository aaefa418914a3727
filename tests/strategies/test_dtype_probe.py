"""The dtype probe: a device other than CPU is asked in a fresh interpreter, which answers as the driver would."""

from __future__ import annotations

import torch

from fuzzdist import fresh_interpreter
from fuzzdist.strategies import _dtype_probe


def test_the_fresh_interpreter_answers_for_cpu_what_the_driver_probes():
    """The child module is the path every GPU takes; asked about CPU it must agree with the in-process probe."""
    answer = fresh_interpreter.ask(_dtype_probe.CHILD_MODULE, "cpu", timeout=_dtype_probe.CHILD_TIMEOUT)
    assert answer.why == ""
    assert answer.value == _dtype_probe.probe_here("cpu")
    assert "torch.float32" in answer.value


def test_a_device_the_child_cannot_answer_for_holds_no_dtype(monkeypatch):
    """No answer (the child failed) is an empty tuple, which the ``dtypes()`` strategy reports at draw time."""
    monkeypatch.setattr(_dtype_probe, "CHILD_MODULE", "platform")  # runs, prints no answer
    _dtype_probe._usable_dtype_names.cache_clear()
    try:
        assert _dtype_probe._usable_dtype_names("cuda:7") == ()
    finally:
        _dtype_probe._usable_dtype_names.cache_clear()
    assert not torch.cuda.is_initialized()
