"""``run_in_checkpoint_dir``, what the checkpoint properties' checks share: the ranks run in a fresh directory
under ``base_dir`` that is gone after the run, also when the run fails."""

from __future__ import annotations

import os
from typing import Any

import pytest

from fuzzdist.errors import InvalidArgument
from fuzzdist.properties.checkpoint import run_in_checkpoint_dir


class _RecordingPool:
    """A stand-in for a pool: records the call and what the directory held while the ranks ran."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[Any, ...]] = []

    def run(self, fn: Any, case: Any, path: str, **kwargs: Any) -> list[Any]:
        self.calls.append((fn, case, path, kwargs, os.path.isdir(path), os.listdir(path)))
        if self.fail:
            raise RuntimeError("a rank failed")
        return [path, path]


def _rank_fn() -> None:
    """Never run: the pool stand-in only records it."""


def test_the_ranks_run_in_an_empty_directory_under_base_dir_removed_afterwards(tmp_path):
    pool = _RecordingPool()
    results = run_in_checkpoint_dir(pool, _rank_fn, "case", str(tmp_path), save="s")
    [(fn, case, path, kwargs, existed, held)] = pool.calls
    assert (fn, case, kwargs, existed, held) == (_rank_fn, "case", {"save": "s"}, True, [])
    assert os.path.dirname(path) == str(tmp_path)
    assert results == [path, path]
    assert not os.path.exists(path)


def test_the_directory_is_removed_when_the_run_fails(tmp_path):
    pool = _RecordingPool(fail=True)
    with pytest.raises(RuntimeError, match="a rank failed"):
        run_in_checkpoint_dir(pool, _rank_fn, "case", str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_a_base_dir_that_is_not_a_directory_is_refused_before_anything_runs(tmp_path):
    pool = _RecordingPool()
    with pytest.raises(InvalidArgument, match="is not a directory"):
        run_in_checkpoint_dir(pool, _rank_fn, "case", str(tmp_path / "missing"))
    assert pool.calls == []
