"""The checkpoint property on a torch whose ``dcp.load`` has no ``no_dist`` (torch 2.6): a distributed
load passes it nothing, so it works there; a single-process load is not drawn there."""

from __future__ import annotations

from typing import Any

import pytest

checkpoint = pytest.importorskip("fuzzdist.properties.checkpoint")


def test_a_distributed_load_does_not_pass_no_dist(monkeypatch):
    seen: list[dict[str, Any]] = []

    def load_of_torch_2_6(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None):
        seen.append({"checkpoint_id": checkpoint_id})

    import torch.distributed.checkpoint as dcp

    monkeypatch.setattr(dcp, "load", load_of_torch_2_6)
    checkpoint.dcp_load({}, "some/path", no_dist=False)
    assert seen == [{"checkpoint_id": "some/path"}]
    with pytest.raises(TypeError, match="no_dist"):  # asked for, it is passed: never silently dropped
        checkpoint.dcp_load({}, "some/path", no_dist=True)
