"""Compiled programs, one per graph structure, kept for the rank process's life: how the compile family keeps
recompilation bounded.

``torch.compile`` caches its graphs on the code object it compiles and guards them on their inputs' shapes,
dtypes and constants (torch.compile's programming model, "Dealing with Recompilations": a new shape recompiles
unless shapes are dynamic).  A code object holds at most ``torch._dynamo.config.recompile_limit`` graphs (8
in torch 2.13) and all together at most ``accumulated_recompile_limit`` (256); past them Dynamo stops
compiling that code and runs it as it is unless ``fail_on_recompile_limit_hit`` is set ("raise a hard error if
cache limit is hit", that option's comment in torch's Dynamo config module), which here would make compiled
equal eager by construction.  So:

* each drawn program is compiled once per (program, backend, options): the key holds the program's steps and
  its input's shape and dtype, so a hit runs the graph already built and a miss compiles exactly once
  (``dynamic=False``: a shape-generic graph would compile differently from the specialised one users get
  for a fixed shape, and the drawn shapes come from a small set, so the keys are few);
* every program runs through its own code object (:func:`fresh_function`), so no code object ever holds more
  than its one graph and Dynamo's limit is never reached;
* ``fail_on_recompile_limit_hit`` is set all the same: a silent fall back to eager raises instead;
* past :data:`MAX_ENTRIES` keys (well under the accumulated limit) the cache and Dynamo's caches are cleared
  (``torch._dynamo.reset()``), which also bounds the memory a long campaign's rank processes hold.

:func:`compiled` also counts what Dynamo did (graphs built, graph breaks with their reasons), for the
property to report as Hypothesis events: a graph break is not a failure.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch

MAX_ENTRIES = 64
"""Compiled programs a rank process keeps before it clears them (and Dynamo's caches)."""


@dataclass
class Compiled:
    """A compiled program, and what compiling it took: ``compile_s`` (the first call's seconds, compile and run
    together), ``graphs`` (the graphs Dynamo built for it) and ``breaks`` (the reasons of its graph breaks)."""

    fn: Callable[..., Any]
    compile_s: float = 0.0
    graphs: int = 0
    breaks: tuple[str, ...] = field(default_factory=tuple)
    called: bool = False


_cache: dict[Hashable, Compiled] = {}


def fresh_function(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """A copy of ``fn`` with a code object of its own (named ``name``): Dynamo caches per code object, so
    programs compiled from copies never share (and never exhaust) one cache."""
    code = fn.__code__.replace(co_name=name)
    copy = types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def compiled(key: Hashable, fn: Callable[..., Any], backend: Any, options: dict[str, Any] | None) -> Compiled:
    """The compiled program for ``key`` (built from ``fn`` the first time the key is asked for)."""
    entry = _cache.get(key)
    if entry is not None:
        return entry
    if len(_cache) >= MAX_ENTRIES:
        clear()
    torch._dynamo.config.fail_on_recompile_limit_hit = True  # never a silent eager fall back
    program = fresh_function(fn, f"compiled_program_{len(_cache)}")
    entry = Compiled(torch.compile(program, backend=backend, options=options or None, dynamic=False))
    _cache[key] = entry
    return entry


def clear() -> None:
    """Forget every compiled program, and Dynamo's caches with them."""
    _cache.clear()
    torch._dynamo.reset()


def size() -> int:
    """How many compiled programs this process holds."""
    return len(_cache)


def call(entry: Compiled, *args: Any) -> Any:
    """Run ``entry``; on its first call, time it and count the graphs and graph breaks Dynamo made."""
    if entry.called:
        return entry.fn(*args)
    import time

    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    breaks = dict(counters["graph_break"])
    start = time.perf_counter()
    out = entry.fn(*args)
    entry.compile_s = time.perf_counter() - start
    entry.graphs = counters["stats"]["unique_graphs"] - graphs
    entry.breaks = tuple(sorted(reason for reason, n in counters["graph_break"].items() if n > breaks.get(reason, 0)))
    entry.called = True
    return out
