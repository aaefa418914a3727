"""``fuzzdist replay --export-script DIR``: each stored failure as a standalone Python script.

While a stored failure is replayed, :class:`RecordingPool` stands in for the test's rank pool and
notes every ``pool.run`` call: the pickled ``(fn, args, kwargs)`` exactly as the pool sent it, the
seed the pool derived from it, and what came back (the results, or the ranks' failure).  The last
call is the one the property failed on.  :func:`render` writes the script: the source of
:mod:`fuzzdist.pool.rank.standalone` (what runs with torch alone: it spawns fresh ranks, runs those
calls in order, each seeded by the ranks' own seeding, with neither pytest nor Hypothesis running)
and the stored failure it compares the last call with:

- **BUG** (exit 1): the same failure again: a rank raises the same exception type, a rank dies,
  the ranks hang, or the call returns the very results the property rejected;
- **FIXED** (exit 0): the call now completes on every rank without that failure (for a failure
  the test body found in the results: the results are no longer the rejected ones);
- **NO VERDICT** (exit 125, which ``git bisect run`` treats as "skip"): the ranks could not be
  started, an earlier call failed, or a different error came up.

:class:`ExportDir` is the output directory: checked before anything runs (not a file, not a
symlink, writable); each script is a new file written by :mod:`fuzzdist.campaign.output`.
"""

from __future__ import annotations

import ast
import base64
import functools
import importlib
import inspect
import io
import os
import pickle
import re
import sys
import sysconfig
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzzdist.campaign.output import check_output, create_output
from fuzzdist.errors import RankCrash, RankError, RankFailure, RankTimeout, UsageError
from fuzzdist.pool.controller import derive_seed, pickle_call
from fuzzdist.pool.rank import standalone
from fuzzdist.pool.rank.standalone import LOOPBACK

# -- recording the calls ---------------------------------------------------------------------


@dataclass
class Call:
    """One ``pool.run`` call: what was sent and what came back."""

    payload: bytes
    seed: int
    name: str  # "module.qualname" of the rank function
    results: list[Any] | None = None
    failure: RankFailure | None = None


@dataclass
class Recording:
    """Every ``pool.run`` of one replayed example, and the pool they ran on."""

    world_size: int = 0
    backend: str = ""
    device: str = ""
    timeout: float = 30.0
    calls: list[Call] = field(default_factory=list)


class RecordingPool:
    """A pool that notes each ``run`` in ``recording`` and hands everything else to ``pool``."""

    def __init__(self, pool: Any, recording: Recording) -> None:
        self._pool = pool
        self._recording = recording
        recording.world_size, recording.backend = pool.world_size, pool.backend
        recording.device, recording.timeout = str(pool.device), float(getattr(pool, "timeout", 30.0))

    def run(self, fn: Any, /, *args: Any, **kwargs: Any) -> list[Any]:
        payload = pickle_call(fn, args, kwargs)  # exactly what the pool sends, so the same seed
        name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
        call = Call(payload, derive_seed(payload), name)
        self._recording.calls.append(call)
        try:
            call.results = self._pool.run(fn, *args, **kwargs)
        except RankFailure as exc:
            call.failure = exc
            raise
        return call.results

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def __repr__(self) -> str:  # Hypothesis prints the example with it
        return repr(self._pool)

    def __enter__(self) -> RecordingPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


def wrap_pools(testargs: dict[str, Any], recording: Recording) -> dict[str, Any]:
    """``testargs`` with every rank pool among them replaced by a :class:`RecordingPool`."""
    from fuzzdist.pool import Pool

    return {
        name: RecordingPool(value, recording) if isinstance(value, Pool) else value for name, value in testargs.items()
    }


# -- what the script checks -------------------------------------------------------------------


def failure_of(recording: Recording, exc: BaseException) -> tuple[dict[str, Any] | None, str]:
    """(the script's FAILED record, "") for the failing example, or (None, why it can't be exported)."""
    if not recording.calls:
        return None, "the failure came before any rank call (pool.run): there is nothing to run on fresh ranks"
    last = recording.calls[-1]
    failure = last.failure
    if failure is None:
        if last.results is None:
            return None, "the last rank call neither returned nor failed"
        try:
            results = pickle.dumps(last.results, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # noqa: BLE001 - anything the results' pickling raises
            return None, f"the results the property rejected can't be pickled ({error})"
        return {
            "kind": "results",
            "results": base64.b64encode(results).decode(),
            "summary": _first_line(str(exc)) or type(exc).__name__,
        }, ""
    if isinstance(failure, RankError):
        return {
            "kind": "raised",
            "types": {int(r): t for r, t in failure.exc_types.items()},
            "summary": _first_line(str(failure)),
        }, ""
    if isinstance(failure, RankTimeout):
        return {"kind": "hang", "ranks": list(failure.ranks), "summary": _first_line(str(failure))}, ""
    if isinstance(failure, RankCrash):
        return {"kind": "crash", "ranks": list(failure.ranks), "summary": _first_line(str(failure))}, ""
    return None, f"the ranks failed in a way the script can't check ({type(failure).__name__})"


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")


def _modules_named(recording: Recording) -> list[str]:
    """The modules the pickled calls name (the rank function's, the arguments' classes'), as loaded here."""
    names: set[str] = set()

    class Names(pickle.Unpickler):  # our own pickle, of objects this process holds: safe to load
        def find_class(self, module: str, name: str) -> Any:
            names.add(module)
            return super().find_class(module, name)

    for call in recording.calls:
        try:
            Names(io.BytesIO(call.payload)).load()
        except Exception:  # noqa: BLE001 - the note is a courtesy; the script doesn't need it
            pass
    return sorted(names)


def _imports_note(recording: Recording) -> str:
    """What the script imports besides torch, for its header."""
    fn_name = recording.calls[-1].name
    modules = _modules_named(recording)
    own = [m for m in modules if m == "fuzzdist" or m.startswith("fuzzdist.")]
    others = [m for m in modules if m not in own and m.split(".")[0] not in _STANDARD]
    if own:
        whose = "the rank function is fuzzdist's own" if fn_name.startswith("fuzzdist.") else "the calls name it"
        note = f"It imports fuzzdist, which must be installed where it runs ({whose}: {', '.join(own)})."
    else:
        note = "The pickled calls name no fuzzdist module."
    if others:
        note += (
            f" It imports {', '.join(others)} from PATHS below (the test's own modules), and with them "
            "whatever they import (a test file: pytest and hypothesis, though neither runs)."
        )
    return note


_STANDARD = {"builtins", "torch", "numpy", "collections", "copyreg", "_codecs", "functools", "operator", "datetime"}


def _project_paths() -> list[str]:
    """sys.path entries outside the Python installation: where the test files were imported from."""
    installed = {
        os.path.realpath(p)
        for p in (
            sys.prefix,
            sys.base_prefix,
            sys.exec_prefix,
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["stdlib"],
        )
    }
    paths = []
    for entry in sys.path:
        if not entry or not os.path.isabs(entry) or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if any(real == p or real.startswith(p + os.sep) for p in installed) or "site-packages" in real:
            continue
        if entry not in paths:
            paths.append(entry)
    return paths


def _safe(text: str) -> str:
    """``text`` with nothing that could end a comment or a docstring: printable, no quotes run."""
    out = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return out.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _comment(text: str, indent: str = "#     ") -> str:
    return (
        "\n".join(
            indent + "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in line)
            for line in text.splitlines()
        )
        or indent + "(none)"
    )


def render(
    nodeid: str,
    what: str,
    example: str,
    recording: Recording,
    failed: dict[str, Any],
    *,
    torch_version: str,
    script_name: str,
) -> str:
    """The text of the standalone script for one stored failure: a header, the standalone module's source
    (:func:`standalone_source`), and the failure as a :class:`~fuzzdist.pool.rank.standalone.Reproducer`."""
    note = f"The rank function is {recording.calls[-1].name}. {_imports_note(recording)}"
    imports = "\n".join(_safe(line) for line in textwrap.wrap(note, 100))
    expected = {
        "raised": "a rank raises the exception type it raised then",
        "hang": "the ranks hang",
        "crash": "a rank process dies",
        "results": "the ranks return the results the property rejected",
    }[failed["kind"]]
    header = f'''"""{_safe(nodeid)}: {_safe(what)}, exported by `fuzzdist replay --export-script`.

Re-runs the shrunk example's {len(recording.calls)} rank call(s) (pool.run) on {recording.world_size} freshly spawned
ranks ({_safe(recording.backend)}, {_safe(recording.device)}), seeded as fuzzdist seeds them, with neither pytest nor
Hypothesis running.  The last call is the one the property failed on; the script says BUG
when {expected}.  Exported with torch {_safe(torch_version)}.
{imports}
The ranks meet through a TCPStore, which has no authentication, bound to {LOOPBACK} (a torch whose
TCPStore takes no master_listen_fd listens on every interface: the script then says so on stderr).

    python {_safe(script_name)}
    git bisect run python {_safe(script_name)}

Prints one line; exits 1 while the failure reproduces ("BUG: ..."), 0 once it doesn't ("FIXED: ..."),
and 125 when it can't tell ("NO VERDICT: ...": the ranks didn't start, an earlier call failed, or a
different error came up; git bisect run skips such a build).  A results failure is checked against
the results the property rejected: FIXED there means the call no longer returns them (the
property's own check is not in this script: `fuzzdist replay` runs it).
"""'''
    return "\n".join(
        [
            header,
            "# Minimal example, as Hypothesis printed it:",
            _comment(example or "(Hypothesis printed no example)"),
            "# What failed:",
            _comment(failed["summary"]),
            "# The code below is fuzzdist's own (fuzzdist/pool/rank/standalone.py); the stored failure follows it.",
            standalone_source(),
            "",
            "# -- the stored failure " + "-" * 72,
            "",
            _reproducer(nodeid, recording, failed),
            "",
            'if __name__ == "__main__":',
            "    sys.exit(main(REPRODUCER))",
            "",
        ]
    )


def _chunks(data: str, indent: str) -> str:
    """A long base64 string as a parenthesised tuple of 96-character strings, one a line."""
    inner = "\n".join(f'{indent}    "{chunk}",' for chunk in textwrap.wrap(data, 96))
    return f"(\n{inner}\n{indent})"


def _reproducer(nodeid: str, recording: Recording, failed: dict[str, Any]) -> str:
    """``REPRODUCER = Reproducer(...)``: the stored failure as Python source, its base64 strings wrapped."""
    indent = " " * 8
    calls = [f"{indent}({_chunks(base64.b64encode(c.payload).decode(), indent)}, {c.seed})," for c in recording.calls]
    failed_items = [
        f"{indent}{key!r}: {_chunks(value, indent) if key == 'results' else repr(value)},"
        for key, value in failed.items()
    ]
    device = "cuda" if str(recording.device).startswith("cuda") else "cpu"
    return "\n".join(
        [
            "REPRODUCER = Reproducer(",
            f"    nodeid={nodeid!r},",
            f"    world_size={recording.world_size!r},",
            f"    backend={recording.backend!r},",
            f"    device={device!r},",
            f"    timeout_s={float(recording.timeout)!r},  # the pool's per-example timeout when the property failed",
            f"    paths={_project_paths()!r},  # where the test's modules were imported from",
            "    # The example's rank calls, in order: the pickled (fn, args, kwargs) and the seed the pool derived",
            "    # from it.",
            "    calls=[",
            *calls,
            "    ],",
            "    failed={",
            *failed_items,
            "    },",
            ")",
        ]
    )


@functools.cache
def standalone_source() -> str:
    """:mod:`fuzzdist.pool.rank.standalone`'s source as a script holds it: its docstring dropped (the script
    has its own), and each ``from fuzzdist... import name`` replaced by ``name``'s own source, so the script
    imports no fuzzdist module of its own accord and runs the very code the ranks run."""
    source = inspect.getsource(standalone)
    lines = source.splitlines()
    replaced: dict[int, tuple[int, list[str]]] = {}  # first line (0-based) -> (line after the last, new lines)
    body = ast.parse(source).body
    for node in body:
        end = node.end_lineno or node.lineno
        if (
            node is body[0]
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            replaced[node.lineno - 1] = (end, [])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fuzzdist":
            replaced[node.lineno - 1] = (end, _embedded(node))
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i in replaced:
            i, new = replaced[i]
            out.extend(new)
            continue
        out.append(lines[i])
        i += 1
    return re.sub(r"\n{4,}", "\n\n\n", "\n".join(out).strip("\n") + "\n")  # at most two blank lines


def _embedded(node: ast.ImportFrom) -> list[str]:
    """The lines that stand for ``from fuzzdist.x import a, b`` in a script: the source of ``a`` and ``b``."""
    module = importlib.import_module(node.module or "")
    lines: list[str] = []
    for alias in node.names:
        if alias.asname is not None:
            raise RuntimeError(
                f"fuzzdist bug: standalone.py imports {alias.name} as {alias.asname}, "
                "which an exported script can't hold"
            )
        lines.append(f"# {node.module}.{alias.name}, as fuzzdist defines it:")
        lines.extend(textwrap.dedent(inspect.getsource(getattr(module, alias.name))).rstrip().splitlines())
        lines.extend(["", ""])
    return lines


# -- the output directory ---------------------------------------------------------------------


class ExportDir:
    """The ``--export-script`` directory: checked up front; each script a new file, written by
    :func:`fuzzdist.campaign.output.create_output` (whole or not at all, never over a file or through a link)."""

    def __init__(self, spec: str) -> None:
        if not spec.strip():
            raise UsageError("--export-script is empty: pass a directory to write the scripts to")
        path = Path(spec).expanduser()
        self.spec = spec
        if path.is_symlink():
            raise UsageError(
                f"--export-script {spec} is a symbolic link: pass a real directory "
                "(the scripts are never written through a link)"
            )
        if path.exists() and not path.is_dir():
            raise UsageError(f"--export-script {spec} is not a directory: pass a directory to write the scripts to")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"can't use --export-script {spec} ({exc.strerror or exc}): pass a directory you can write"
            ) from None
        if check_output(path / "script.py") is not None:
            raise UsageError(f"can't write to --export-script {spec}: pass a directory you can write")
        self.path = path

    def write(self, stem: str, text: str) -> Path:
        """Create ``<stem>.py`` (``<stem>-2.py``... if taken: nothing is overwritten) and return its path."""
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "failure"  # never a path
        for n in range(1, 1000):
            path = self.path / (f"{stem}.py" if n == 1 else f"{stem}-{n}.py")
            try:
                create_output(path, text)
            except FileExistsError:
                continue
            return path
        raise OSError(f"999 scripts named {stem}*.py already in {self.spec}")

    def close(self) -> None:
        """Nothing is held open between scripts; kept for the callers' ``finally``."""


def script_stem(nodeid: str, index: int) -> str:
    """A file name for a node id's ``index``-th stored failure: ``test_x-test_y-cpu-w2-1``."""
    stem = nodeid.replace(".py::", "-").replace("::", "-").replace("/", "-").replace("[", "-").replace("]", "")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{stem}-{index}").strip("-.") or "failure"
