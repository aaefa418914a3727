"""Which lines of the named packages' Python source a rank ran, example by example (``fuzzdist run --cover``).

Off unless the driver's run message asks for it (:func:`request`: the source roots, the mechanism
and the scope, from :func:`fuzzdist.pool.line_coverage.scope_field`): then :func:`begin` and :func:`end`
bracket each example and :func:`end` returns the lines this rank reached for the first time in the
current *scope* (the driver names it: the property being fuzzed), as ``{filename: [line, ...]}``.
Only what is new travels, so the reply stays small after the first few examples.  Recording starts
after the example's function is unpickled (that import is not the example's), and lines travel only
with the reply, so an example that hangs or kills the rank reports none.

The fastest mechanism the interpreter offers:

- ``sys.monitoring`` (Python >= 3.12): a LINE callback that returns ``DISABLE`` for every location
  once it was seen (and at once outside the named files), so a line costs one callback per scope and
  the code runs uninstrumented after.  Every thread of the rank is seen.  A change of scope re-arms
  the locations (``restart_events``) because the new scope has seen none of them.
- coverage.py's C tracer (3.10, 3.11, where ``coverage`` is installed): the same ``settrace`` hook,
  written in C, so a call outside the named files costs a dictionary look-up in C instead of a call
  of a Python function, and a line inside them a set insertion.  Used through the attributes
  coverage.py's own collector sets on it (``data``, ``should_trace``, ...); each example gets a new
  tracer and a new ``data``, whose lines are compared with the scope's afterwards.  Only the
  example's thread is traced.
- ``sys.settrace`` (3.10, 3.11 without ``coverage``): a global trace function in Python that returns
  a local one only for frames of code in the named files; every other Python call pays one call of
  the global function.  Only the example's thread is traced.

The driver may ask for another mechanism than the fastest (the benchmark compares them); a rank
asked for the C tracer without ``coverage`` installed uses ``settrace``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

MECHANISMS = ("monitoring", "ctracer", "settrace")
_TOOL_IDS = (4, 3)  # sys.monitoring tool ids free by convention (0-2 and 5 are named for others)


def best_mechanism() -> str:
    """The mechanism this interpreter runs fastest."""
    if hasattr(sys, "monitoring"):
        return "monitoring"
    return "ctracer" if has_c_tracer() else "settrace"


def has_c_tracer() -> bool:
    """Whether coverage.py's C tracer can be used here."""
    return _c_tracer() is not None


def _c_tracer() -> Any:
    """coverage.py's C tracer class, or None (coverage not installed, or built without its C part)."""
    try:
        from coverage.tracer import CTracer  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return CTracer


class _Collector:
    """What both mechanisms share: which files count, the scopes' seen lines, the lines new in this example."""

    mechanism = ""

    def __init__(self, roots: list[str]) -> None:
        self._dirs = tuple(os.path.join(r, "") for r in roots if os.path.isdir(r))
        self._files = frozenset(r for r in roots if not os.path.isdir(r))
        self._wanted: dict[str, bool] = {}  # filename -> inside the roots (decided once per file)
        self._scopes: dict[Any, set[tuple[str, int]]] = {}
        self._scope: Any = _NO_SCOPE
        self._seen: set[tuple[str, int]] = set()  # the current scope's lines, reported already
        self._new: list[tuple[str, int]] = []  # lines first reached in the current example
        self.active = False

    def wanted(self, filename: str) -> bool:
        known = self._wanted.get(filename)
        if known is None:
            known = self._wanted[filename] = filename in self._files or filename.startswith(self._dirs)
        return known

    def begin(self, scope: Any) -> None:
        if scope != self._scope:
            self._scope = scope
            self._seen = self._scopes.setdefault(scope, set())
            self._rearm()
        self._new = []
        self.active = True
        self._start()

    def end(self) -> dict[str, list[int]] | None:
        self._stop()
        self.active = False
        if not self._new:
            return None
        out: dict[str, list[int]] = {}
        for filename, line in self._new:
            out.setdefault(filename, []).append(line)
        self._new = []
        return out

    def _rearm(self) -> None:
        """A new scope: every location may be new to it."""

    def _start(self) -> None:
        """Start recording (called at each example's start)."""

    def _stop(self) -> None:
        """Stop recording (called at each example's end)."""

    def close(self) -> None:
        """Stop for good (the driver asked for other roots or another mechanism)."""
        self._stop()
        self.active = False


_NO_SCOPE = object()


class _Monitoring(_Collector):
    mechanism = "monitoring"

    def __init__(self, roots: list[str]) -> None:
        super().__init__(roots)
        mon = sys.monitoring  # type: ignore[attr-defined]  # Python >= 3.12
        self._mon = mon
        self._disable = mon.DISABLE
        for tool in _TOOL_IDS:
            if mon.get_tool(tool) is None:
                mon.use_tool_id(tool, "fuzzdist-cover")
                break
        else:
            from fuzzdist.errors import CapabilityError

            raise CapabilityError(
                "--cover: every sys.monitoring tool id fuzzdist can use is taken by other "
                "tools in the rank processes (debuggers, profilers); stop one of them"
            )
        self._tool = tool
        mon.register_callback(tool, mon.events.LINE, self._line)
        # Left on between examples: changing the global events re-instruments every function.
        mon.set_events(tool, mon.events.LINE)

    def _line(self, code: Any, line: int) -> Any:
        filename = code.co_filename
        wanted = self._wanted.get(filename)
        if wanted is None:
            wanted = self.wanted(filename)
        if not wanted:
            return self._disable
        if not self.active:  # between examples: keep the location armed for the next one
            return None
        key = (filename, line)
        if key not in self._seen:
            self._seen.add(key)
            self._new.append(key)
        return self._disable

    def _rearm(self) -> None:
        self._mon.restart_events()

    def close(self) -> None:
        super().close()
        self._mon.set_events(self._tool, 0)
        self._mon.register_callback(self._tool, self._mon.events.LINE, None)
        self._mon.free_tool_id(self._tool)


class _Settrace(_Collector):
    """``sys.settrace``; a function whose every line the scope has seen is no longer traced (the nearest
    this mechanism comes to DISABLE: its calls still pay the global hook)."""

    mechanism = "settrace"

    def __init__(self, roots: list[str]) -> None:
        super().__init__(roots)
        self._by_code: dict[Any, bool] = {}
        self._left: dict[Any, set[int]] = {}  # code -> its lines the current scope hasn't seen yet

    def _call(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        left = self._left.get(code)
        if left is not None:
            return self._local if left else None
        wanted = self._by_code.get(code)
        if wanted is None:
            wanted = self._by_code[code] = self.wanted(code.co_filename)
        if not wanted:
            return None
        filename, seen = code.co_filename, self._seen
        left = self._left[code] = {line for line in _own_lines(code) if (filename, line) not in seen}
        return self._local if left else None

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            code, line = frame.f_code, frame.f_lineno
            left = self._left.get(code)
            if left:  # (a line another code object shares was seen through that one: still this one's)
                left.discard(line)
            key = (code.co_filename, line)
            if key not in self._seen:
                self._seen.add(key)
                self._new.append(key)
        return self._local

    def _rearm(self) -> None:
        self._left = {}

    def _start(self) -> None:
        sys.settrace(self._call)

    def _stop(self) -> None:
        sys.settrace(None)


class _CTracer(_Collector):
    """coverage.py's C tracer (see the module's docstring), one per example."""

    mechanism = "ctracer"

    def __init__(self, roots: list[str]) -> None:
        super().__init__(roots)
        from coverage.disposition import disposition_init
        from coverage.tracer import CFileDisposition  # type: ignore[import-not-found,unused-ignore]

        self._tracer_class = _c_tracer()
        # the C tracer reads its dispositions' fields in C: they must be its own type
        self._disposition = lambda filename: disposition_init(CFileDisposition, filename)
        self._dispositions: dict[str, Any] = {}  # filename -> whether to trace it, asked once per file
        self._data: dict[str, set[int]] = {}
        self._tracer: Any = None

    def _should_trace(self, filename: str, frame: Any) -> Any:
        disposition = self._disposition(filename)
        if self.wanted(filename):
            disposition.trace, disposition.source_filename = True, filename
        else:
            disposition.reason = "outside the measured packages"
        return disposition

    def _start(self) -> None:
        tracer = self._tracer = self._tracer_class()
        tracer.data = self._data = {}
        tracer.trace_arcs = False
        tracer.should_trace = self._should_trace
        tracer.should_trace_cache = self._dispositions
        tracer.warn = _ignore
        tracer.lock_data = tracer.unlock_data = _ignore
        # The rest as coverage's collector sets them when it has no plugins, contexts or concurrency:
        # the C tracer reads them without checking (unset, it crashes).
        tracer.file_tracers = {}
        tracer.check_include = _not_included
        tracer.concur_id_func = tracer.disable_plugin = None
        tracer.should_start_context = tracer.switch_context = None
        tracer.start()

    def _stop(self) -> None:
        tracer, self._tracer = self._tracer, None
        if tracer is None:
            return
        tracer.stop()
        seen, new = self._seen, self._new
        for filename, lines in self._data.items():
            for line in lines:
                key = (filename, line)
                if key not in seen:
                    seen.add(key)
                    new.append(key)
        self._data = {}


def _not_included(filename: str, frame: Any) -> bool:
    """What the C tracer asks of a file ``should_trace`` left out: still left out."""
    return False


def _ignore(*args: Any) -> None:
    """What the C tracer calls to warn or to lock its data: nothing to do here (one thread)."""


def _own_lines(code: Any) -> set[int]:
    """The lines of ``code``'s own instructions (not its nested functions'), less the def line's set-up."""
    lines = {line for _, _, line in code.co_lines() if line is not None}
    if len(lines) > 1:
        lines.discard(code.co_firstlineno)
    return lines


_collector: _Collector | None = None
_config: tuple[tuple[str, ...], str] | None = None  # the current collector's (roots, mechanism)
_scope: Any = None
_on = False  # the driver asked for coverage in the current example


def request(cover: Any) -> None:
    """What the driver's run message asked for: None (coverage off) or ``(roots, mechanism, scope)``."""
    global _collector, _config, _scope, _on
    if cover is None:
        _on = False
        return
    roots, mechanism, scope = cover
    config = (tuple(roots), mechanism)
    if config != _config:
        if _collector is not None:
            _collector.close()
        _collector = _new_collector(list(roots), mechanism)
        _config = config
    _scope, _on = scope, True


def _new_collector(roots: list[str], mechanism: str) -> _Collector:
    if mechanism == "monitoring":
        return _Monitoring(roots)
    if mechanism == "ctracer" and _c_tracer() is not None:
        return _CTracer(roots)
    return _Settrace(roots)


def begin() -> None:
    """Start recording an example (nothing when coverage is off)."""
    if _on and _collector is not None:
        _collector.begin(_scope)


def end() -> dict[str, list[int]] | None:
    """Stop recording; the lines first reached in the current scope during the example (None: none, or off)."""
    c = _collector
    if c is None or not c.active:
        return None
    return c.end()
