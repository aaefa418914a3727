"""The pool's message framing over a pipe: whole messages, any size, Connection's wire format."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading

import pytest

from fuzzdist.pool import framing


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    return r, w


def test_messages_of_every_size_arrive_whole_and_in_order():
    r, w = _pipe()
    sizes = [0, 1, 65_536 - 4, 65_536, 65_537, 300_000]  # around one read's chunk, and past a pipe's buffer
    messages = [bytes([i]) * n for i, n in enumerate(sizes)]
    writer = threading.Thread(target=lambda: [framing.send(w, m) for m in messages])
    writer.start()
    reader = framing.Reader(r)
    try:
        assert [reader.recv() for _ in messages] == messages
    finally:
        writer.join(10)
        os.close(r)
        os.close(w)


def test_two_messages_read_at_once_are_kept_apart():
    r, w = _pipe()
    framing.send(w, b"first")
    framing.send(w, b"second")  # both are in the pipe before the first read
    reader = framing.Reader(r)
    assert reader.recv() == b"first"
    assert reader.ready()  # the second waits in the buffer: poll alone would not see it
    assert reader.recv() == b"second"
    assert not reader.ready()
    os.close(r)
    os.close(w)


def test_a_closed_writer_is_eof_also_mid_message():
    r, w = _pipe()
    os.write(w, (10).to_bytes(4, "big") + b"abc")  # a header for 10 bytes, then only 3
    os.close(w)
    reader = framing.Reader(r)
    assert reader.ready()
    with pytest.raises(EOFError):
        reader.recv()
    os.close(r)


def test_the_wire_format_is_connections():
    a, b = mp.Pipe(duplex=False)  # a reads, b writes
    c, d = mp.Pipe(duplex=False)
    framing.send(b.fileno(), b"to a Connection")
    assert a.recv_bytes() == b"to a Connection"
    d.send_bytes(b"from a Connection")
    assert framing.Reader(c.fileno()).recv() == b"from a Connection"
    for conn in (a, b, c, d):
        conn.close()
