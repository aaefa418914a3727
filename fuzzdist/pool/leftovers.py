"""What a pool's processes leave in the temporary folder, and how it goes away.

Two kinds of leftovers:

* a rank ends with ``os._exit`` (it must not run the interpreter's exit in
  a process torch's threads still use), which skips multiprocessing's own
  exit: the ``pymp-*`` folder it made for ``file_descriptor`` sharing (the
  resource sharer's socket) stays.  :func:`before_os_exit` runs that exit
  first.
* a driver killed by SIGKILL can't remove its pool's folder.  A pool names
  its folder after its driver (:func:`pool_dir_prefix`), so that the next
  pool to start removes the folders whose driver is dead
  (:func:`remove_stale_pool_dirs`).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path

POOL_DIR_PREFIX = "fuzzdist-pool-"
_OWNED = re.compile(rf"^{re.escape(POOL_DIR_PREFIX)}(\d+)-")  # fuzzdist-pool-<driver pid>-<random>


def pool_dir_prefix() -> str:
    """The prefix of a new pool folder: ``tempfile.mkdtemp(prefix=pool_dir_prefix())`` names it after this
    process, its driver, so that :func:`remove_stale_pool_dirs` can tell when it is left over."""
    return f"{POOL_DIR_PREFIX}{os.getpid()}-"


def before_os_exit() -> None:
    """Part of what a normal interpreter exit does for multiprocessing, for a process about to end with
    ``os._exit``: its exit finalizers run, so the ``pymp-*`` folder of ``file_descriptor`` sharing goes.
    Not the rest of its exit handler, which joins the non-daemon processes this one started with no time
    limit (a rank's watchdog kills those).  Never raises (the process is ending)."""
    util = sys.modules.get("multiprocessing.util")
    if util is None:  # multiprocessing was never used: nothing of it to clean
        return
    try:
        util._run_finalizers(0)  # the order multiprocessing's exit handler runs them in, less the joins
        util._run_finalizers()
    except BaseException:  # noqa: BLE001 - best effort on the way out
        pass


def remove_stale_pool_dirs(tmpdir: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove the pool folders (``fuzzdist-pool-<pid>-*`` in ``tmpdir``, default the temporary folder)
    whose driver is dead: this user's folders only, never through a link.  Returns the paths removed.

    A pid that is alive but whose process started after the folder was last changed is another process
    with a reused pid: that folder's driver is dead too.  Folders named otherwise (older fuzzdists) are left.
    """
    root = Path(tmpdir if tmpdir is not None else tempfile.gettempdir())
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        match = _OWNED.match(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue  # a link, a file, or another user's: not ours to touch
        if _alive_since(int(match.group(1)), info.st_mtime):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)  # rmtree does not follow links inside (fd-based)
        if not os.path.lexists(entry.path):
            removed.append(entry.path)
    return removed


def _alive_since(pid: int, mtime: float) -> bool:
    """Is ``pid`` a live process that may own a folder last changed at ``mtime``?"""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's: not this user's driver
        return False
    except OSError:
        return True
    started = _start_time(pid)
    return started is None or started <= mtime + 1.0


def _start_time(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), from /proc; None where unknown."""
    from fuzzdist.pool.rank.process_tree import start_time

    ticks = start_time(pid)
    if ticks is None:
        return None
    try:
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")
