"""Reading a secret from a file only its owner can read: a password, a key that signs messages."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable


def read_private_file(
    path: str, named: str, remedy: str, error: Callable[[str], Exception], limit: int = 4096
) -> bytes:
    """The first ``limit`` bytes of ``path``, a regular file (not a link) that this user owns and nobody
    else can read or write.  Otherwise ``error(message)`` is raised, the message naming the file as
    ``named`` and, when it can't be opened, saying what to do with ``remedy`` (e.g. ``point it at``)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # a link could point anywhere
    except OSError as exc:
        raise error(
            f"can't read {named} ({exc.strerror or exc}): {remedy} a regular file (not a link) only you can read"
        ) from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())  # of what was opened, so it can't be swapped after the check
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise error(f"{named} must be a regular file you own that nobody else can read or write (chmod 600 {path})")
        return f.read(limit)
