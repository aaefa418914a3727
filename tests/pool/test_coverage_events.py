"""Every property reports the regions of input space it reached, through Hypothesis's event()."""

from __future__ import annotations

from helpers import rank_fns
from hypothesis import given, settings

from fuzzdist import strategies as fst
from fuzzdist.pool import input_coverage as _coverage


def test_specs_are_described():
    spec = fst.TensorSpec((2, 3), fst.supported_dtypes()[0])
    labels = _coverage._describe(spec)
    assert "layout=contiguous" in labels and "ndim=2" in labels and labels[0].startswith("dtype=")
    order = fst.CompletionOrder(2, (("complete", 1), ("fail", 0)))
    assert _coverage._describe(order) == ["completion=reordered", "completion-has=fail"]
    assert _coverage._describe(fst.SharingStrategyMode("file_system")) == ["sharing=file_system"]
    assert _coverage._describe(3) == []


def test_pool_run_records_events_inside_a_test(rank_pool, monkeypatch):
    recorded: list[str] = []
    monkeypatch.setattr("hypothesis.event", lambda label, payload="": recorded.append(label))

    @settings(max_examples=5, database=None, deadline=None)
    @given(spec=fst.tensor_specs(max_bytes=64))
    def prop(spec):
        rank_pool.run(rank_fns.whoami_seed, spec)

    prop()
    assert any(label.startswith("dtype=") for label in recorded)
    assert any(label.startswith("pattern=") for label in recorded)
    recorded.clear()
    rank_pool.run(rank_fns.whoami_seed, fst.TensorSpec((1,), fst.supported_dtypes()[0]))  # outside a test
    assert recorded == []
