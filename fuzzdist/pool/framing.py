"""Length-prefixed messages straight over a pipe's file descriptor.

The wire format is ``multiprocessing.connection.Connection``'s (a 4-byte
big-endian length, or -1 and an 8-byte one for 2 GiB and more), but a
message costs one ``os.write`` and usually one ``os.read``: ``Connection``
reads the header and the body apart and goes through several Python layers,
which measured ~15 us of CPU a message on the pool's hot path.
"""

from __future__ import annotations

import os
import select
import struct

_HEADER = struct.Struct("!i")
_LONG = struct.Struct("!Q")
_CHUNK = 1 << 16


def send(fd: int, data: bytes) -> None:
    """Write one message to ``fd`` (blocking until all of it is written)."""
    n = len(data)
    header = _HEADER.pack(-1) + _LONG.pack(n) if n > 0x7FFFFFFF else _HEADER.pack(n)
    view = memoryview(header + data) if n <= _CHUNK else None
    if view is None:  # a large message: don't copy it to prepend the header
        _write_all(fd, memoryview(header))
        view = memoryview(data)
    _write_all(fd, view)


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


class Reader:
    """Reads whole messages from ``fd``; bytes read past a message wait in a buffer for the next."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = b""
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def ready(self) -> bool:
        """Whether :meth:`recv` would return (or raise EOFError) without waiting for the writer."""
        return bool(self._buf) or bool(self._poll.poll(0))

    def recv(self) -> bytes:
        """The next message; EOFError once the writer closed its end."""
        buf = self._fill(self._buf, _HEADER.size)
        (n,) = _HEADER.unpack_from(buf)
        start = _HEADER.size
        if n == -1:
            buf = self._fill(buf, start + _LONG.size)
            (n,) = _LONG.unpack_from(buf, start)
            start += _LONG.size
        buf = self._fill(buf, start + n)
        self._buf = buf[start + n :]
        return buf[start : start + n]

    def _fill(self, buf: bytes, size: int) -> bytes:
        if len(buf) >= size:
            return buf
        parts = [buf]
        have = len(buf)
        while have < size:
            chunk = os.read(self.fd, max(_CHUNK, size - have))
            if not chunk:
                self._buf = b""
                raise EOFError("the other end closed the pipe")
            parts.append(chunk)
            have += len(chunk)
        return b"".join(parts)
