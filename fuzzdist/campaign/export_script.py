"""``fuzzdist replay --export-script DIR``: each stored failure as a standalone Python script.

While a stored failure is replayed, :class:`RecordingPool` stands in for the test's rank pool and
notes every ``pool.run`` call: the pickled ``(fn, args, kwargs)`` exactly as the pool sent it, the
seed the pool derived from it, and what came back (the results, or the ranks' failure).  The last
call is the one the property failed on.  :func:`render` writes a script that spawns fresh ranks
(``multiprocessing``, a TCPStore rendezvous), runs those calls in order, seeded as fuzzdist seeds
them, with neither pytest nor Hypothesis running, and compares the last call with the stored
failure:

- **BUG** (exit 1): the same failure again: a rank raises the same exception type, a rank dies,
  the ranks hang, or the call returns the very results the property rejected;
- **FIXED** (exit 0): the call now completes on every rank without that failure (for a failure
  the test body found in the results: the results are no longer the rejected ones);
- **NO VERDICT** (exit 125, which ``git bisect run`` treats as "skip"): the ranks could not be
  started, an earlier call failed, or a different error came up.

:class:`ExportDir` is the output directory: checked before anything runs (not a file, not a
symlink, writable), opened once, and written with exclusive creates that follow no links.
"""

from __future__ import annotations

import base64
import errno
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

from fuzzdist.errors import RankCrash, RankError, RankFailure, RankTimeout, UsageError
from fuzzdist.pool.controller import derive_seed, pickle_call

EXIT_FIXED, EXIT_BUG, EXIT_NO_VERDICT = 0, 1, 125


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

    return {name: RecordingPool(value, recording) if isinstance(value, Pool) else value
            for name, value in testargs.items()}


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
        return {"kind": "results", "results": base64.b64encode(results).decode(),
                "summary": _first_line(str(exc)) or type(exc).__name__}, ""
    if isinstance(failure, RankError):
        return {"kind": "raised", "types": {int(r): t for r, t in failure.exc_types.items()},
                "summary": _first_line(str(failure))}, ""
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
        except Exception:  # noqa: BLE001, S110 - the note is a courtesy; the script doesn't need it
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
        note += (f" It imports {', '.join(others)} from PATHS below (the test's own modules), and with them "
                 "whatever they import (a test file: pytest and hypothesis, though neither runs).")
    return note


_STANDARD = {"builtins", "torch", "numpy", "collections", "copyreg", "_codecs", "functools", "operator", "datetime"}


def _project_paths() -> list[str]:
    """sys.path entries outside the Python installation: where the test files were imported from."""
    installed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"])}
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
    return "\n".join(indent + "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                                      for ch in line) for line in text.splitlines()) or indent + "(none)"


def render(nodeid: str, what: str, example: str, recording: Recording, failed: dict[str, Any],
           *, torch_version: str, script_name: str) -> str:
    """The text of the standalone script for one stored failure."""
    note = f"The rank function is {recording.calls[-1].name}. {_imports_note(recording)}"
    imports = "\n".join(_safe(line) for line in textwrap.wrap(note, 100))
    calls = ",\n".join(
        "    ({payload}, {seed})".format(
            payload="(\n" + "\n".join(f'        "{chunk}"' for chunk in
                                      textwrap.wrap(base64.b64encode(c.payload).decode(), 96)) + "\n    )",
            seed=c.seed)
        for c in recording.calls)
    expected = {"raised": "a rank raises the exception type it raised then",
                "hang": "the ranks hang",
                "crash": "a rank process dies",
                "results": "the ranks return the results the property rejected"}[failed["kind"]]
    header = f'''"""{_safe(nodeid)}: {_safe(what)}, exported by `fuzzdist replay --export-script`.

Re-runs the shrunk example's {len(recording.calls)} rank call(s) (pool.run) on {recording.world_size} freshly spawned
ranks ({_safe(recording.backend)}, {_safe(recording.device)}), seeded as fuzzdist seeds them, with neither pytest nor
Hypothesis running.  The last call is the one the property failed on; the script says BUG
when {expected}.  Exported with torch {_safe(torch_version)}.
{imports}

    python {_safe(script_name)}
    git bisect run python {_safe(script_name)}

Prints one line; exits 1 while the failure reproduces ("BUG: ..."), 0 once it doesn't ("FIXED: ..."),
and 125 when it can't tell ("NO VERDICT: ...": the ranks didn't start, an earlier call failed, or a
different error came up; git bisect run skips such a build).  A results failure is checked against
the results the property rejected: FIXED there means the call no longer returns them (the
property's own check is not in this script: `fuzzdist replay` runs it).
"""'''
    body = _TEMPLATE.format(
        example=_comment(example or "(Hypothesis printed no example)"),
        error=_comment(failed["summary"]),
        world_size=recording.world_size, backend=repr(recording.backend),
        device=repr("cuda" if str(recording.device).startswith("cuda") else "cpu"),
        timeout=repr(float(recording.timeout)), paths=repr(_project_paths()),
        nodeid=repr(nodeid), calls=calls,
        failed=_literal(failed))
    return header + "\n" + body


def _literal(failed: dict[str, Any]) -> str:
    """``failed`` as Python source, its long base64 string wrapped."""
    items = []
    for key, value in failed.items():
        if key == "results":
            chunks = textwrap.wrap(value, 96)
            items.append('    "results": (\n' + "\n".join(f'        "{c}"' for c in chunks) + "\n    ),")
        else:
            items.append(f"    {key!r}: {value!r},")
    return "{\n" + "\n".join(items) + "\n}"


_TEMPLATE = '''# Minimal example, as Hypothesis printed it:
{example}
# What failed:
{error}
import base64
import multiprocessing as mp
import os
import pickle
import queue
import random
import shutil
import socket
import sys
import tempfile
import time
import traceback
from datetime import timedelta

NODEID = {nodeid}
WORLD_SIZE = {world_size}
BACKEND = {backend}
DEVICE = {device}
TIMEOUT_S = {timeout}  # the pool's per-example timeout when the property failed
STARTUP_S = 300.0  # a generous bound on the ranks' start-up: it is not part of the failure
PATHS = {paths}  # where the test's modules were imported from
# The example's rank calls, in order: the pickled (fn, args, kwargs) and the seed fuzzdist derived from it.
CALLS = [
{calls},
]
FAILED = {failed}


class Context:
    """What fuzzdist hands a rank function as ``ctx`` (fuzzdist.pool.rank.context.RankContext)."""

    def __init__(self, rank, device, group, store, tmpdir):
        self.rank, self.world_size, self.device, self.backend = rank, WORLD_SIZE, device, BACKEND
        self.group, self.tmpdir, self.seed, self.example = group, tmpdir, 0, 0
        self._base_store = store

    @property
    def store(self):
        import torch.distributed as dist

        return dist.PrefixStore(f"fuzzdist/example/{{self.example}}/", self._base_store)

    def request_recycle(self, reason):
        pass  # every call here runs in processes that end with the script


def seed_everything(seed, cuda):
    import torch

    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    if cuda:
        torch.cuda.manual_seed_all(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed % 2**32)


def rank_main(rank, port, tmpdir, replies):
    sys.path[:0] = [p for p in PATHS if p not in sys.path]
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, WORLD_SIZE, rank == 0, timeout=timedelta(seconds=STARTUP_S))
    dist.init_process_group(BACKEND, store=store, rank=rank, world_size=WORLD_SIZE,
                            timeout=timedelta(seconds=max(TIMEOUT_S, 60.0)))
    device = torch.device("cpu")
    if DEVICE == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    ctx = Context(rank, device, dist.group.WORLD, store, tmpdir)
    replies.put((rank, -1, "ready", None))
    for i, (payload, seed) in enumerate(CALLS):
        ctx.seed, ctx.example = seed, i + 1
        try:
            fn, args, kwargs = pickle.loads(base64.b64decode("".join(payload)))
            seed_everything(seed, device.type == "cuda")
            result = fn(ctx, *args, **kwargs)
        except BaseException as exc:  # every failure goes back to the parent
            kind = type(exc)
            replies.put((rank, i, "raised", (f"{{kind.__module__}}.{{kind.__qualname__}}", str(exc).strip()[:300],
                                            traceback.format_exc())))
            return
        try:
            data = pickle.dumps(result)
        except Exception as exc:
            data = pickle.dumps(f"unpicklable result: {{exc}}")
        replies.put((rank, i, "ok", data))
    dist.destroy_process_group()


def same(a, b):
    """Equal, bit for bit for tensors (NaNs included), element by element for containers."""
    import torch

    if torch.is_tensor(a) or torch.is_tensor(b):
        if not (torch.is_tensor(a) and torch.is_tensor(b)) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        a, b = a.detach().cpu().contiguous().reshape(-1), b.detach().cpu().contiguous().reshape(-1)
        if a.dtype.is_complex:
            a, b = torch.view_as_real(a).reshape(-1), torch.view_as_real(b).reshape(-1)
        return a.numel() == 0 or torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    try:
        return bool(a == b) or (a != a and b != b)  # NaN equals NaN here
    except Exception:
        return repr(a) == repr(b)


def verdict(failing, replies, dead, hung):
    """(exit code, line) for the last call, from what each rank did."""
    if FAILED["kind"] == "crash":
        if dead:
            died = ", ".join(f"rank {{r}} ({{c}})" for r, c in sorted(dead.items()))
            return 1, f"BUG: rank process died again: {{died}}"
    if FAILED["kind"] == "hang":
        if hung:
            return 1, (f"BUG: ranks {{sorted(hung)}} still running after {{TIMEOUT_S:g}}s (scaled to the start-up), "
                       "as when it failed")
    if dead:
        return 125, f"NO VERDICT: rank process died: {{sorted(dead.items())}} (it {{FAILED['summary']}} when it failed)"
    raised = {{r: reply for r, (what, reply) in replies.items() if what == "raised"}}
    if FAILED["kind"] == "raised":
        again = {{r: reply for r, reply in raised.items() if reply[0] in FAILED["types"].values()}}
        if again:
            r, (kind, message, _) = sorted(again.items())[0]
            return 1, f"BUG: rank {{r}} raised {{kind}}: {{message.splitlines()[0] if message else ''}}"
    if raised:
        r, (kind, message, text) = sorted(raised.items())[0]
        sys.stderr.write(text)
        first = message.splitlines()[0] if message else ""
        return 125, f"NO VERDICT: rank {{r}} raised {{kind}}: {{first}} (not the failure stored)"
    if hung:
        return 125, f"NO VERDICT: ranks {{sorted(hung)}} did not finish the call within {{TIMEOUT_S:g}}s (scaled)"
    results = [pickle.loads(replies[r][1]) for r in range(WORLD_SIZE)]
    if FAILED["kind"] == "results":
        rejected = pickle.loads(base64.b64decode("".join(FAILED["results"])))
        if same(results, rejected):
            return 1, f"BUG: the ranks returned the results the property rejected: {{repr(results)[:300]}}"
        return 0, f"FIXED: the ranks no longer return the results the property rejected; now {{repr(results)[:300]}}"
    return 0, f"FIXED: the call completed on every rank (when it failed: {{FAILED['summary']}})"


def main():
    sys.path[:0] = [p for p in PATHS if p not in sys.path]
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    replies = ctx.Queue()
    tmpdir = tempfile.mkdtemp(prefix="fuzzdist-repro-")
    ranks = [ctx.Process(target=rank_main, args=(r, port, tmpdir, replies), daemon=True) for r in range(WORLD_SIZE)]
    started = time.monotonic()
    for p in ranks:
        p.start()
    try:
        return run_calls(ranks, replies, started)
    finally:
        for p in ranks:
            p.join(timeout=1)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        shutil.rmtree(tmpdir, ignore_errors=True)


def run_calls(ranks, replies, started):
    ready = set()
    inbox = {{}}  # call -> {{rank: reply}}: a rank may be a call ahead of the others
    while len(ready) < WORLD_SIZE:
        dead = {{r: p.exitcode for r, p in enumerate(ranks) if p.exitcode is not None}}
        if dead:
            return 125, f"NO VERDICT: rank(s) {{sorted(dead)}} exited while starting (exit codes {{dead}})"
        if time.monotonic() - started > STARTUP_S:
            return 125, f"NO VERDICT: the ranks did not start within {{STARTUP_S:g}}s"
        try:
            rank, call, what, data = replies.get(timeout=0.5)
        except queue.Empty:
            continue
        ready.add(rank)
        if call >= 0:
            inbox.setdefault(call, {{}})[rank] = (what, data)
    # A slow machine gets a proportionally longer wait: start-up took `slow` times a quick one.
    slow = max(1.0, (time.monotonic() - started) / 10.0)
    last = len(CALLS) - 1
    for i in range(len(CALLS)):
        got = inbox.setdefault(i, {{}})
        deadline = time.monotonic() + TIMEOUT_S * slow
        dead = {{}}
        while len(got) < WORLD_SIZE and time.monotonic() < deadline:
            try:
                rank, call, what, data = replies.get(timeout=0.2)
                inbox.setdefault(call, {{}})[rank] = (what, data)
            except queue.Empty:
                dead = {{r: p.exitcode for r, p in enumerate(ranks) if p.exitcode not in (None, 0) and r not in got}}
                if dead:
                    break
                if any(what == "raised" for what, _ in got.values()):
                    deadline = min(deadline, time.monotonic() + 5.0 * slow)  # peers of a raising rank may wait forever
        hung = set(range(WORLD_SIZE)) - set(got) - set(dead)
        if i < last:
            if dead or hung or any(what != "ok" for what, _ in got.values()):
                bad = {{r: reply[1][0] if reply[0] == "raised" else reply[0]
                       for r, reply in got.items() if reply[0] != "ok"}}
                return 125, (f"NO VERDICT: call {{i + 1}} of {{len(CALLS)}}, which passed when the property failed, "
                             f"failed now (raised: {{bad}}, died: {{dead}}, unfinished: {{sorted(hung)}})")
            continue
        return verdict(i, got, {{r: describe(c) for r, c in dead.items()}}, hung)
    return 125, "NO VERDICT: no call to check"


def describe(code):
    import signal

    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {{-code}}"
    return f"exit code {{code}}"


if __name__ == "__main__":
    try:
        code, line = main()
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        code, line = 125, "NO VERDICT: the script itself failed (traceback above)"
    print(f"{{line}}  [{{NODEID}}]")
    sys.exit(code)
'''


# -- the output directory ---------------------------------------------------------------------

class ExportDir:
    """The ``--export-script`` directory: checked up front, opened once, written without following links."""

    def __init__(self, spec: str) -> None:
        if not spec.strip():
            raise UsageError("--export-script is empty: pass a directory to write the scripts to")
        path = Path(spec).expanduser()
        self.spec = spec
        if path.is_symlink():
            raise UsageError(f"--export-script {spec} is a symbolic link: pass a real directory "
                             "(the scripts are never written through a link)")
        if path.exists() and not path.is_dir():
            raise UsageError(f"--export-script {spec} is not a directory: pass a directory to write the scripts to")
        try:
            path.mkdir(parents=True, exist_ok=True)
            flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
            self.fd = os.open(path, flags)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if exc.errno == errno.ELOOP:
                reason = "it became a symbolic link"
            raise UsageError(f"can't use --export-script {spec} ({reason}): pass a directory you can write") from None
        if not self._can_write():
            os.close(self.fd)
            raise UsageError(f"can't write to --export-script {spec}: pass a directory you can write")
        self.path = path
        self.written: list[Path] = []

    def _can_write(self) -> bool:
        name = f".fuzzdist-probe-{os.getpid()}"
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600,
                         dir_fd=self.fd)
        except OSError:
            return False
        os.close(fd)
        os.unlink(name, dir_fd=self.fd)
        return True

    def write(self, stem: str, text: str) -> Path:
        """Create ``<stem>.py`` (``<stem>-2.py``... if taken: nothing is overwritten) and return its path."""
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "failure"  # never a path
        for n in range(1, 1000):
            name = f"{stem}.py" if n == 1 else f"{stem}-{n}.py"
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o755,
                             dir_fd=self.fd)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            self.written.append(self.path / name)
            return self.path / name
        raise OSError(f"999 scripts named {stem}*.py already in {self.spec}")

    def close(self) -> None:
        os.close(self.fd)


def script_stem(nodeid: str, index: int) -> str:
    """A file name for a node id's ``index``-th stored failure: ``test_x-test_y-cpu-w2-1``."""
    stem = nodeid.replace(".py::", "-").replace("::", "-").replace("/", "-").replace("[", "-").replace("]", "")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{stem}-{index}").strip("-.") or "failure"
