"""The model-resharding property asks its pool for a timeout that fits a first DDP construction under load."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from fuzzdist.pool import DEFAULT_TIMEOUT
from fuzzdist.properties.reshard import model_state

PROPERTY = pathlib.Path(__file__).parents[2] / "properties" / "test_reshard_model.py"


def test_the_property_runs_under_its_own_longer_timeout():
    spec = importlib.util.spec_from_file_location("reshard_model_property", PROPERTY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except pytest.skip.Exception:
        pytest.skip("this torch has no fully_shard")
    marks = [m for m in module.test_model_state_loads_into_another_world_size.pytestmark if m.name == "fuzzdist"]
    assert marks[0].kwargs.get("timeout") == model_state.TIMEOUT_S
    assert model_state.TIMEOUT_S > DEFAULT_TIMEOUT
