"""What fuzzdist's processes leave in the temporary folder, and how it goes away.

Three kinds of leftovers:

* a rank ends with ``os._exit`` (it must not run the interpreter's exit in
  a process torch's threads still use), which skips multiprocessing's own
  exit: the ``pymp-*`` folder it made for ``file_descriptor`` sharing (the
  resource sharer's socket) stays.  :func:`before_os_exit` runs that exit
  first.
* a process killed by SIGKILL can't remove the folders it made: a pool's
  folder (``fuzzdist-pool-*``), ``fuzzdist run``'s JUnit folder
  (``fuzzdist-junit-*``), a ``--jobs`` parent's workers' folder, a torchrun
  rank's folder (``fuzzdist-torchrun-*``), the driver's multiprocessing
  folder (``pymp-*``, the fork server's socket), a rank's own
  multiprocessing folder (``pymp-*``, made when the rank starts: the
  resource sharer's socket of ``file_descriptor`` sharing).
  The next run, and a pool that restarts its ranks, remove the ones whose
  owner is dead (:func:`remove_dead`).
* nothing else: a folder fuzzdist can't prove is its own is never touched.

Who owns a folder is decided by a lock, not a pid: the process that makes a
folder (:func:`make_owned_dir`) or uses multiprocessing's
(:func:`own_multiprocessing_temp_dir`) holds an ``flock`` on the file
:data:`OWNER_LOCK` in it for as long as it uses the folder; the kernel
drops the lock when that process ends, however it ends.  A pid would not do:
two PID namespaces that share one temporary folder (containers sharing
``/tmp``) see each other's processes as dead, and pids are reused.  A folder
is removed only by a process that took its lock, so never under its owner.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from fuzzdist.errors import InvalidState

POOL_DIR_PREFIX = "fuzzdist-pool-"
JUNIT_DIR_PREFIX = "fuzzdist-junit-"
JOBS_DIR_PREFIX = "fuzzdist-jobs-"
TORCHRUN_DIR_PREFIX = "fuzzdist-torchrun-"
MP_DIR_PREFIX = "pymp-"  # multiprocessing's (util.get_temp_dir): only the ones holding OWNER_LOCK are fuzzdist's
OWNER_LOCK = ".fuzzdist-owner.lock"
_TEMP_PREFIXES = (POOL_DIR_PREFIX, JUNIT_DIR_PREFIX, JOBS_DIR_PREFIX, TORCHRUN_DIR_PREFIX, MP_DIR_PREFIX)
_TRIES = 10  # new folders tried when another run's cleaner took the last one before its lock was held
_mp_owned: dict[str, Owned] = {}  # this process's multiprocessing folder, its lock held for the process's life


class Owned:
    """A folder this process owns: the ``flock`` on its :data:`OWNER_LOCK` file is held until :meth:`release`."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def fileno(self) -> int:
        """The lock's file descriptor: a child given it (``pass_fds``) holds the lock too, until it ends."""
        if self._fd is None:
            raise InvalidState(f"{self.path}: its lock was released")
        return self._fd

    def release(self) -> None:
        """Let the lock go: after the folder is removed, or for the next run to remove it.  Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def keep(self) -> None:
        """Keep the folder for the user (it holds something to read): its lock file goes first, so that no
        later run takes it for a leftover; then the lock is released."""
        try:
            os.unlink(os.path.join(self.path, OWNER_LOCK))
        except OSError:
            pass
        self.release()


def make_owned_dir(prefix: str, dir: str | os.PathLike[str] | None = None) -> Owned:  # noqa: A002 - the same name as tempfile.mkdtemp's argument
    """A new folder, as ``tempfile.mkdtemp(prefix=prefix, dir=dir)`` makes it (only this user can open it),
    owned by this process until :meth:`Owned.release`.  OSError if the folder can't be made; InvalidState if
    each new one is removed before its lock is held."""
    for _ in range(_TRIES):
        path = tempfile.mkdtemp(prefix=prefix, dir=dir)
        owned = _hold(path)
        if owned is not None:
            return owned
        shutil.rmtree(path, ignore_errors=True)  # another run's cleaner took it: it may still be removing it
    raise InvalidState(
        f"could not make a folder of my own in {dir or tempfile.gettempdir()}: another process "
        f"removed each of {_TRIES} new ones at once; look for what cleans that folder"
    )


def own_multiprocessing_temp_dir() -> str | None:
    """Make this process's multiprocessing folder (``pymp-*``: where the fork server's socket goes, and the
    resource sharer's of ``file_descriptor`` sharing) now, and own it for the rest of the process's life:
    a later run removes it if this process is SIGKILLed.  Returns its path; None if it is not this
    process's to own: a child of multiprocessing inherits its parent's folder, and owned here, its lock
    would go with this process while the parent still uses the folder."""
    from multiprocessing import util

    path = util.get_temp_dir()
    if path in _mp_owned:
        return path
    if not _made_here(path):
        return None
    owned = _hold(path)
    if owned is None:
        return None
    _mp_owned[path] = owned
    return path


def _made_here(path: str) -> bool:
    """Did this process make the multiprocessing folder ``path``?  Its maker, alone, holds the finalizer
    that removes it at exit (a child's are cleared when it starts)."""
    from multiprocessing import util

    remover = getattr(util, "_remove_temp_dir", None)
    finalizers = list(getattr(util, "_finalizer_registry", {}).values())
    return any(
        getattr(f, "_callback", None) is remover and tuple(getattr(f, "_args", ()))[1:2] == (path,) for f in finalizers
    )


def _hold(folder: str) -> Owned | None:
    """Take the lock of ``folder`` (making its lock file); None if another process holds it or the
    folder went (a cleaner took it before this process held it)."""
    lock = os.path.join(folder, OWNER_LOCK)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:  # a file system without flock: no cleaner can take the lock either, so it is kept
        return Owned(folder, fd)
    if not _is_file_at(fd, lock):  # a cleaner held it first and removed the folder meanwhile
        os.close(fd)
        return None
    return Owned(folder, fd)


def _is_file_at(fd: int, path: str) -> bool:
    """Is the open file ``fd`` still the file at ``path``?"""
    try:
        here, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


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


def remove_dead(root: str | os.PathLike[str], matches: Callable[[str], bool]) -> list[str]:
    """Remove the folders in ``root`` whose name ``matches`` and whose owner is dead: its lock file is there
    and nobody holds the lock.  This user's folders only, never through a link; a folder with no lock file
    (being made, kept on purpose, an older fuzzdist's, someone else's) is left.  Returns the paths removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if not matches(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue  # a link, a file, or another user's: not ours to touch
        if _remove_if_dead(entry.path):
            removed.append(entry.path)
    return removed


def _remove_if_dead(folder: str) -> bool:
    """Remove ``folder`` if its owner lock can be taken, holding the lock while it goes; True if it went."""
    lock = os.path.join(folder, OWNER_LOCK)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # no lock file, or one that is not ours to open: not provably a dead owner's
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its owner is alive (or this file system can't tell)
        os.close(fd)
        return False
    try:
        if not _is_file_at(fd, lock):
            return False  # removed meanwhile by its owner or another cleaner
        shutil.rmtree(folder, ignore_errors=True)  # rmtree does not follow links inside (fd-based)
    finally:
        os.close(fd)
    return not os.path.lexists(folder)


def remove_leftovers(tmpdir: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove what dead fuzzdist processes left in ``tmpdir`` (default the temporary folder): pool folders,
    JUnit folders, ``--jobs`` folders, torchrun ranks' folders and multiprocessing folders whose owner is dead (see
    :func:`remove_dead`).  Returns the paths removed."""
    root = Path(tmpdir if tmpdir is not None else tempfile.gettempdir())
    return remove_dead(root, lambda name: name.startswith(_TEMP_PREFIXES))


def pool_dir() -> Owned:
    """A new pool's folder in the temporary folder, owned by this process (its driver)."""
    return make_owned_dir(POOL_DIR_PREFIX)
