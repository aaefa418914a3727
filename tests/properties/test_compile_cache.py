"""The compile family's cache keeps recompilation bounded: one compiled program per key, each on a code object of
its own (so no program meets Dynamo's per-code recompile limit), cleared past its size."""

from __future__ import annotations

import pytest
import torch

from fuzzdist.properties.compile import cache
from fuzzdist.properties.compile.functional import Step, run_program


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def _chain(n: int) -> tuple[Step, ...]:
    """A program of ``n`` neg steps: a different structure (a different graph) for each ``n``."""
    return tuple(Step("compute", "neg", (i,)) for i in range(n))


def test_more_programs_than_the_recompile_limit_are_each_compiled():
    x = torch.arange(3.0)
    limit = torch._dynamo.config.recompile_limit
    for n in range(1, limit + 3):  # one code object would have hit its limit (and raised) at limit + 1
        entry = cache.compiled(("chain", n), run_program, "eager", None)
        values = cache.call(entry, _chain(n), x, None)
        assert entry.graphs == 1, (n, entry)
        assert torch.equal(values[-1], x if n % 2 == 0 else -x), n


def test_a_key_is_compiled_once():
    x = torch.arange(3.0)
    first = cache.compiled("once", run_program, "eager", None)
    cache.call(first, _chain(2), x, None)
    again = cache.compiled("once", run_program, "eager", None)
    assert again is first and again.called
    assert cache.size() == 1


def test_the_cache_is_cleared_past_its_size(monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 2)
    for key in range(3):
        cache.compiled(key, run_program, "eager", None)
    assert cache.size() == 1  # the third key found two held: they were cleared first
