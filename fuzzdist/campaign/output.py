"""Every file fuzzdist writes for the user (JSON report, HTML page, JUnit XML, check-pg's JSON) goes through here.

The folder an output goes to may be shared (``/tmp``, a CI workspace), so
the writer trusts nothing in it:

* a regular file (or nothing yet, or a link) is replaced atomically: the
  text goes to a temporary file created exclusively under a random name in
  the same folder (``O_CREAT | O_EXCL``: it never opens a file or a link
  someone planted there), is flushed and fsynced, then renamed over the
  target.  A link at the target is replaced by the file, never written
  through.  A reader only ever sees a whole file.  The file gets the mode a
  plain ``open()`` would give it (the umask applies at creation; the
  process's umask is never changed), or the mode of the file it replaces;
* a device or a FIFO (``--html /dev/null``) is written straight to, never
  replaced by a regular file;
* a folder, a socket, or a missing folder is an ``OSError`` saying so.

:func:`check_output` looks at a path before a run, so that a path that
can't be written is refused before anything runs.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

_TRIES = 100  # random names tried for the temporary file (a clash is a 1 in 2**64 event, or an attack)
_TEMP_EXTRA = len(".") + len(".0123456789abcdef.tmp")  # what the temporary name adds to the output's


def write_output(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` as described in the module docstring; OSError says why it could not."""
    data = text.encode("utf-8")
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
        _write_special(path, info, data)
        return
    folder = path.parent
    fd, tmp = _create_exclusive(folder, path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            if info is not None and stat.S_ISREG(info.st_mode):
                os.fchmod(f.fileno(), stat.S_IMODE(info.st_mode))  # as an open() of the file would keep it
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def create_output(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to a new file ``path``: FileExistsError if anything is there (a link included), never
    overwritten.  The text is written whole to a temporary file first, as :func:`write_output` does, then
    linked in under ``path`` (``link`` refuses a name that exists), so a reader only ever sees a whole file.
    Where the file system has no hard links, ``path`` is created exclusively and written in place."""
    data = text.encode("utf-8")
    path = Path(path)
    fd, tmp = _create_exclusive(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
            return
        except FileExistsError:
            raise
        except OSError:  # no hard links here (EPERM, ENOTSUP...): an exclusive create of the name instead
            pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        with os.fdopen(os.open(path, flags, 0o666), "wb") as f:
            f.write(data)
    finally:
        os.unlink(tmp)


def _create_exclusive(folder: Path, name: str) -> tuple[int, str]:
    """A new file in ``folder`` under a random name, opened for writing: (fd, path).

    ``O_EXCL`` makes the kernel refuse a name that exists, a link included (dangling or not), so nothing
    planted there is opened; mode 0o666 lets the umask give the mode a plain ``open()`` gives.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    stem = _temporary_stem(folder, name)
    for _ in range(_TRIES):
        tmp = str(folder / f".{stem}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name in {folder} after {_TRIES} tries")


def _temporary_stem(folder: Path, name: str) -> str:
    """``name``, cut short where needed so that the temporary name (``name`` and 22 characters) stays within
    the longest name the file system takes: an output name it takes is never refused for its temporary."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    room = max(1, (limit if limit > 0 else 255) - _TEMP_EXTRA)
    stem = name
    while len(os.fsencode(stem)) > room:  # counted in bytes, as the file system counts
        stem = stem[:-1]
    return stem


def _write_special(path: Path, info: os.stat_result, data: bytes) -> None:
    """Write to a device or a FIFO in place (replacing ``/dev/null`` with a regular file would break it)."""
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "it is a folder: name a file in it", str(path))
    if not (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
        raise OSError(errno.EINVAL, "it is neither a file nor a device", str(path))
    # O_NONBLOCK: a FIFO nobody reads is an error (ENXIO), not a wait forever.
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def check_output(path: str | os.PathLike) -> str | None:
    """Why ``path`` can't be written by :func:`write_output`, or None: before a run, so that a bad path is
    refused before anything runs.  (A folder that turns read-only later is still reported at the end.)"""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        return exc.strerror or str(exc)
    if info is not None and stat.S_ISDIR(info.st_mode):
        return "it is a folder: name a file in it"
    if info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
        if not (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
            return "it is neither a file nor a device"
        return None if os.access(path, os.W_OK) else "no permission to write to it"
    folder = path.parent
    if not folder.is_dir():
        return f"the folder {folder} does not exist"
    try:
        fd, tmp = _create_exclusive(folder, path.name)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(tmp)
    return None


def same_output(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Do ``a`` and ``b`` name the same file (the same path after links in the folders, or one file)?"""
    pa, pb = Path(os.path.abspath(a)), Path(os.path.abspath(b))
    if pa.parent.resolve() / pa.name == pb.parent.resolve() / pb.name:
        return True
    try:
        return os.path.samefile(pa, pb)
    except OSError:
        return False
