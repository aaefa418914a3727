"""A secret is read only from a regular file its owner alone can read, and every refusal says what to do."""

from __future__ import annotations

import os

import pytest

from fuzzdist.errors import InvalidState
from fuzzdist.pool.private_file import read_private_file


def _read(path: os.PathLike[str]) -> bytes:
    return read_private_file(str(path), f"the key file {path}", "point it at", InvalidState, limit=8)


def test_a_private_file_is_read_up_to_the_limit(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"0123456789")
    secret.chmod(0o600)
    assert _read(secret) == b"01234567"


def test_a_file_others_can_read_is_refused_naming_the_fix(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"x")
    secret.chmod(0o640)
    with pytest.raises(InvalidState, match=r"nobody else can read or write \(chmod 600 .*secret\)"):
        _read(secret)


def test_a_link_is_refused_even_to_a_private_file(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"x")
    secret.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(secret)
    with pytest.raises(
        InvalidState,
        match=r"can't read the key file .*link \(.*\): point it at a regular file "
        r"\(not a link\) only you can read",
    ):
        _read(link)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(InvalidState, match="can't read the key file"):
        _read(tmp_path / "absent")
