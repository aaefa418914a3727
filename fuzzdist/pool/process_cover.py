"""``--cover`` in the processes a property starts itself (torchrun's agent and its workers): their lines,
merged into the same ledger as the ranks' (:mod:`fuzzdist.pool.line_coverage`).

The driver wraps the start of such processes in :func:`gathering`: it yields the environment variable
that asks them to record (nothing when coverage is off) and, once they are done, adds what they wrote
to the ledger.  A started process calls :func:`record_this_process` first thing (or is started as
``python -m fuzzdist.pool.process_cover -m MODULE ARGS...``): it records with the ranks' mechanism and
writes its lines to a file of its own in the folder the variable names when it exits, or when it
calls :func:`flush` (before it ends itself with ``os._exit`` or a signal, which skip the exit
handlers).  A process killed from outside writes nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator

from fuzzdist.pool import line_coverage
from fuzzdist.pool.rank import line_cover

VARIABLE = "FUZZDIST_PROCESS_COVER"
"""JSON ``{"roots": [...], "mechanism": ..., "folder": ...}``: what to measure and where to write it."""


@contextlib.contextmanager
def gathering() -> Iterator[dict[str, str]]:
    """The environment to add to the processes started inside (empty when coverage is off); on leaving,
    their lines go into the ledger under its current scope."""
    field = line_coverage.scope_field()
    if field is None:
        yield {}
        return
    roots, mechanism, _ = field
    folder = tempfile.mkdtemp(prefix="fuzzdist-cover-")
    try:
        yield {VARIABLE: json.dumps({"roots": list(roots), "mechanism": mechanism, "folder": folder})}
    finally:
        ledger = line_coverage.ledger()
        for name in sorted(os.listdir(folder)):
            try:
                with open(os.path.join(folder, name)) as f:
                    lines = json.load(f)
            except (OSError, ValueError):
                continue  # a process killed while it wrote: its lines are lost, like a killed rank's
            if ledger is not None and isinstance(lines, dict):
                ledger.add(lines)
        shutil.rmtree(folder, ignore_errors=True)


_folder: str | None = None


def record_this_process() -> bool:
    """Start recording this process's lines if its environment asks for it; True if it does."""
    global _folder
    raw = os.environ.get(VARIABLE)
    if not raw or _folder is not None:
        return _folder is not None
    config = json.loads(raw)
    _folder = str(config["folder"])
    line_cover.request((tuple(config["roots"]), str(config["mechanism"]), "process"))
    line_cover.begin()
    atexit.register(flush)
    return True


def flush() -> None:
    """Write the lines recorded so far to a new file in the folder, and go on recording."""
    if _folder is None:
        return
    lines = line_cover.end()
    if lines:
        path = os.path.join(_folder, f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        with open(path + ".part", "w") as f:
            json.dump(lines, f)
        os.replace(path + ".part", path)  # the driver never reads half a file
    line_cover.begin()


def main(argv: list[str]) -> None:
    """``python -m fuzzdist.pool.process_cover -m MODULE ARGS...``: run MODULE as ``python -m`` would,
    recording its lines."""
    if len(argv) < 2 or argv[0] != "-m":
        sys.exit("usage: python -m fuzzdist.pool.process_cover -m MODULE [ARGS...]")
    record_this_process()
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
