"""Under torchrun, every value fuzzdist unpickles from torchrun's store is signed with a secret of the run.

torchrun's store (a ``TCPStore``) listens on every interface, whatever
``--master-addr`` says, and has no authentication: anyone who can reach
``MASTER_ADDR:MASTER_PORT`` can read and write its keys.  fuzzdist's
messages are pickles, and unpickling runs code.  So each value fuzzdist
puts there is sealed with an HMAC-SHA256 over its key and its bytes
(:meth:`Signer.seal`), and a value is unpickled only once its tag checks
(:meth:`Signer.open`); a value that does not is refused with
:class:`~fuzzdist.errors.ForgedMessage`, never loaded.  The keys' prefix
is derived from the secret too, so nobody without it can guess them.

The secret is shared by the ranks without the store (:func:`load_secret`):

* ``FUZZDIST_TORCHRUN_SECRET``: a string of at least 16 characters, the
  same on every node (the launcher sets it);
* ``FUZZDIST_TORCHRUN_SECRET_FILE``: a file of at least 16 bytes, owned by
  the user and readable by nobody else;
* on one node without either, fuzzdist makes one: the first rank writes 32
  random bytes to a file in a folder only the user can open, named after
  the job's store address and the attempt (what every rank of one torchrun
  shares, a wrapper script between torchrun and fuzzdist or not), and the
  other ranks read it; it is removed once the group has formed
  (:func:`forget_node_secret`).

Before anything runs the ranks check that they have one secret
(:func:`check_same_secret`): each puts a fingerprint of its secret (an HMAC
of a public label: it tells whether two secrets are the same, not what they
are) under a fixed key, and a rank whose secret differs is refused with one
line naming the secret, instead of its messages going unread.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from fuzzdist.errors import ForgedMessage, InvalidState
from fuzzdist.pool.private_file import read_private_file

SECRET_ENV = "FUZZDIST_TORCHRUN_SECRET"
SECRET_FILE_ENV = "FUZZDIST_TORCHRUN_SECRET_FILE"
MIN_SECRET = 16  # bytes (characters) a given secret must have at least
_TAG = hashlib.sha256().digest_size

_HOW = (
    f"set {SECRET_ENV} to the same random string (16 characters or more) on every node, e.g. "
    f"export {SECRET_ENV}=$(python -c 'import secrets; print(secrets.token_hex(32))'), or "
    f"{SECRET_FILE_ENV} to a file only you can read that every node has"
)


class Signer:
    """Seals and opens the values of one torchrun attempt (``scope``: its run id and restart count).

    ``prefix`` is the attempt's key prefix in the store: unguessable without the secret.
    """

    def __init__(self, secret: bytes, scope: str) -> None:
        self._key = hmac.new(secret, b"fuzzdist-torchrun-v1\0" + scope.encode(), hashlib.sha256).digest()
        self.prefix = f"fuzzdist/{hmac.new(self._key, b'prefix', hashlib.sha256).hexdigest()[:32]}/"

    def _tag(self, key: str, data: bytes) -> bytes:
        return hmac.new(self._key, key.encode() + b"\0" + data, hashlib.sha256).digest()

    def seal(self, key: str, data: bytes) -> bytes:
        """``data`` with its tag in front, for the store's ``key`` (a sealed value moved to another key
        does not open there)."""
        return self._tag(key, data) + data

    def open(self, key: str, value: bytes) -> bytes:
        """The data sealed in ``value`` at ``key``; :class:`~fuzzdist.errors.ForgedMessage` if its tag
        does not check (the value was not written by a rank of this run)."""
        tag, data = value[:_TAG], value[_TAG:]
        if len(value) < _TAG or not hmac.compare_digest(tag, self._tag(key, data)):
            raise ForgedMessage(
                f"refused the value of {key!r} in torchrun's store: it is not signed with this run's "
                "secret, so it was not written by one of this run's ranks and was not unpickled. Someone "
                "else can write to the store (it listens on every interface at MASTER_ADDR:MASTER_PORT): "
                "block that port from other hosts (docs/security.md), or check that every rank has the "
                f"same {SECRET_ENV}."
            )
        return data


def scope() -> str:
    """This attempt of the torchrun job: its run id and restart count."""
    return f"{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def load_secret() -> bytes:
    """The run's secret, from the environment, a file, or (one node) made here; InvalidState says what to
    set when there is none."""
    given = os.environ.get(SECRET_ENV)
    if given is not None:
        if len(given) < MIN_SECRET:
            raise InvalidState(f"{SECRET_ENV} is {len(given)} characters long: {_HOW}")
        return given.encode()
    path = os.environ.get(SECRET_FILE_ENV)
    if path is not None:
        return _read_secret_file(path)
    world, local = os.environ.get("WORLD_SIZE"), os.environ.get("LOCAL_WORLD_SIZE")
    if world is not None and world == local:
        return _node_secret()
    raise InvalidState(
        f"this torchrun job spans several nodes and fuzzdist has no secret to sign its messages "
        f"in torchrun's store with (anyone who can reach the store could otherwise make the "
        f"ranks run code): {_HOW}"
    )


def _read_secret_file(path: str) -> bytes:
    data = read_private_file(path, f"{SECRET_FILE_ENV}={path}", "point it at", InvalidState).strip()
    if len(data) < MIN_SECRET:
        raise InvalidState(
            f"{SECRET_FILE_ENV}={path} holds {len(data)} bytes: put at least {MIN_SECRET} random bytes in it"
        )
    return data


def private_dir() -> Path:
    """``$TMPDIR/fuzzdist-<uid>``: a folder only this user can open (made if missing, checked if found)."""
    path = _private_path()
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise InvalidState(
            f"{path} is not a folder only you can open (a link, another user's, or open to "
            f"others): remove it, or {_HOW}"
        )
    return path


def _private_path() -> Path:
    return Path(tempfile.gettempdir()) / f"fuzzdist-{os.getuid()}"


def _node_file(folder: Path | None = None) -> Path:
    # Every local rank of one attempt has the job's store address, and no other job listening on this host
    # has it; not the parent's pid: a wrapper script that does not exec is each rank's own parent.
    job = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    name = hashlib.sha256(f"{job}\0{scope()}".encode()).hexdigest()[:32]
    return (private_dir() if folder is None else folder) / f"torchrun-{name}.key"


def _node_secret() -> bytes:
    """One node: the first rank writes a random secret where only this user can read; the others read it."""
    path = _node_file()
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key.")
    except FileNotFoundError:  # another job's forget_node_secret removed the empty folder just now
        path = _node_file()
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        try:
            os.link(tmp, path)  # atomic, and never over a file that exists: the first rank's secret wins
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise InvalidState(f"can't read the ranks' shared secret file {path} ({exc.strerror or exc}): {_HOW}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        data = f.read()
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and len(data) == 32:
        return data
    raise InvalidState(f"{path} is not the secret file fuzzdist makes: remove it, or {_HOW}")


def fingerprint(secret: bytes, scope: str) -> bytes:
    """What a rank shows the others of its ``secret``: an HMAC of a public label and the attempt, which
    tells whether two ranks' secrets are the same and nothing else of them."""
    return hmac.new(secret, b"fuzzdist-torchrun-fingerprint-v1\0" + scope.encode(), hashlib.sha256).digest()


def fingerprint_key(scope: str, rank: int) -> str:
    """Where ``rank`` puts its fingerprint in torchrun's store: a fixed key, known to ranks of any secret."""
    return f"fuzzdist/fingerprint/{scope}/{rank}"


def secret_source() -> str:
    """Where this rank's secret comes from, in words, for a message."""
    if SECRET_ENV in os.environ:
        return SECRET_ENV
    if SECRET_FILE_ENV in os.environ:
        return f"{SECRET_FILE_ENV}={os.environ[SECRET_FILE_ENV]}"
    return f"the one-node secret fuzzdist makes (neither {SECRET_ENV} nor {SECRET_FILE_ENV} is set)"


def check_same_secret(store: Any, rank: int, world_size: int, secret: bytes, timeout: float) -> None:
    """Before anything runs: does every rank have this rank's secret?  Each rank puts its fingerprint in
    ``store``; rank 0 compares every rank's with its own, the others rank 0's.  InvalidState names the
    secret when they differ, or the ranks that showed none within ``timeout`` seconds."""
    attempt = scope()
    mine = fingerprint(secret, attempt)
    store.set(fingerprint_key(attempt, rank), mine)
    others = list(range(1, world_size)) if rank == 0 else [0]
    keys = [fingerprint_key(attempt, r) for r in others]
    try:
        store.wait(keys, timedelta(seconds=timeout))
    except Exception:  # noqa: BLE001 - torch's store error (a timeout) or the store went away
        missing = [r for r, key in zip(others, keys, strict=True) if not _has(store, key)]
        raise InvalidState(
            f"rank(s) {', '.join(map(str, missing))} did not show which secret they sign torchrun's "
            f"store messages with within {timeout:g}s: see their output for why"
        ) from None
    differ = [r for r, key in zip(others, keys, strict=True) if not hmac.compare_digest(store.get(key), mine)]
    if not differ:
        return
    whose = (
        f"rank(s) {', '.join(map(str, differ))} have another secret than rank 0's"
        if rank == 0
        else f"rank {rank}'s secret is not rank 0's"
    )
    raise InvalidState(
        f"{whose} ({secret_source()}): the ranks could not read each other's messages, so "
        f"nothing was run. Give every rank the same secret: {_HOW}"
    )


def _has(store: Any, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except Exception:  # noqa: BLE001 - the store went away
        return False


def forget_node_secret() -> None:
    """Remove this node's secret file once every rank has read it (the group has formed); no-op when the
    secret came from the environment."""
    if SECRET_ENV in os.environ or SECRET_FILE_ENV in os.environ:
        return
    path = _node_file(_private_path())  # not private_dir(): it would make the folder again
    try:
        os.unlink(path)
    except OSError:
        pass
    try:
        os.rmdir(path.parent)  # only if empty: another job's file keeps it
    except OSError:
        pass
