"""The example database a campaign writes to and a replay reads from: a directory or a Redis URL.

``open_database(spec)`` checks up front that the database can be used
(a directory that can be written, a Redis server that answers), so a bad
``--database`` is a one-line error before anything runs.

fuzzdist keeps a small *index* in the database itself, under
:data:`INDEX_KEY`: one entry per (Hypothesis database key, pytest node id)
pair, written when a campaign finds a failure.  Hypothesis files a test's
examples under ``function_digest(inner_test)``, which changes whenever the
test's source changes; the index is what lets ``fuzzdist replay`` say
"stored failures for X under an older version of the test" instead of
silently ignoring them.

Hypothesis's directory database ignores an ``OSError`` on save (a folder
made read-only, a full disk or ``$TMPDIR``), and Redis raises.  So every
database is opened behind :class:`CheckedSaves`, which keeps a save's error
instead of raising it inside Hypothesis's engine, and a campaign reads each
failure back (:meth:`Database.not_kept`): what the database did not keep is
said, and the report keeps its :func:`replay_command`, which needs no
database.
A Redis URL may carry a password (``redis://:PASSWORD@host/0``); nothing
fuzzdist writes or prints holds it (:func:`redact` puts ``***`` in its place
everywhere).  The password can also come from outside the command line: a
file only its owner can read (``--database-password-file``) or the
:data:`PASSWORD_ENV` variable; a URL whose password is ``***`` (a redacted
command pasted back) takes it from there.

What fuzzdist reads from a database is bounded: an entry larger than
:data:`MAX_ENTRY_BYTES` is left out of what the database gives Hypothesis and
fuzzdist (:class:`BoundedDatabase`), never decoded, and counted so that the
campaign and replay can say so.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from fuzzdist.campaign.plain_text import one_line
from fuzzdist.errors import DatabaseError, DatabaseUnreadable
from fuzzdist.pool.private_file import read_private_file

INDEX_KEY = b"fuzzdist.index.v1"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
# Hypothesis's RedisExampleDatabase lets keys expire 8 days after their last use; a
# fleet's findings should outlive a long weekend and a holiday, so keep them a year.
REDIS_EXPIRE_AFTER = timedelta(days=365)
REDIS_KEY_PREFIX = b"hypothesis-example:"  # Hypothesis's default: what a fleet's nodes already share
PASSWORD_ENV = "FUZZDIST_REDIS_PASSWORD"
REDACTED = "***"
# Hypothesis's entries are choice sequences of a few kilobytes; one past this was not written by a
# campaign, and decoding and replaying it costs about a hundred times its size in memory.
MAX_ENTRY_BYTES = 1 << 20

# The password of a Redis URL: after "user:" in its authority (up to the last "@" before the path),
# or in a "password=" query parameter.
_URL_PASSWORD = re.compile(r"(?P<head>\b(?:rediss?|unix)://[^:@/\s]*:)(?P<password>[^\s/?#]*)(?=@)")
_QUERY_PASSWORD = re.compile(r"(?P<head>\b(?:rediss?|unix)://\S*?[?&]password=)(?P<password>[^&#\s]*)")


class _ReadingDatabase(ExampleDatabase):
    """``db`` with its own way of reading (a subclass's ``fetch``): saving, deleting and moving go
    straight to ``db``, and it is shown as ``db`` is."""

    def __init__(self, db: ExampleDatabase) -> None:
        super().__init__()
        self.db = db

    def __repr__(self) -> str:
        return repr(self.db)

    def save(self, key: bytes, value: bytes) -> None:
        self.db.save(key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self.db.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.db.move(src, dest, value)


class BoundedDatabase(_ReadingDatabase):
    """``db`` whose ``fetch`` leaves out the entries larger than :data:`MAX_ENTRY_BYTES`: Hypothesis
    would decode and replay them, at about a hundred times their size in memory.  Each one left out is
    counted under its key (:meth:`too_large`); saving, deleting and moving go straight to ``db``."""

    def __init__(self, db: ExampleDatabase) -> None:
        super().__init__(db)
        self._too_large: dict[bytes, set[bytes]] = {}  # key -> digests of the entries left out

    def fetch(self, key: bytes) -> Iterable[bytes]:
        try:
            values = list(self.db.fetch(key))
        except Exception as exc:  # whatever the backend raises: Redis gone, a folder unreadable
            raise DatabaseUnreadable(exc) from exc
        for value in values:
            if len(value) > MAX_ENTRY_BYTES:
                self._too_large.setdefault(key, set()).add(hashlib.sha256(value).digest())
            else:
                yield value

    def too_large(self, key: bytes) -> int:
        """Entries of ``key`` left out so far because of their size."""
        return len(self._too_large.get(key, ()))


class CheckedSaves(ExampleDatabase):
    """``inner`` with the error of a save, a delete or a move kept (:attr:`last_error`) instead of raised:
    raised inside Hypothesis's engine it would be filed as the property's failure.  Whether a failure
    was kept is read back afterwards (:meth:`Database.not_kept`)."""

    def __init__(self, inner: ExampleDatabase) -> None:
        super().__init__()
        self.inner = inner
        self.last_error: str | None = None  # the latest write's error, on one line

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(key)

    def save(self, key: bytes, value: bytes) -> None:
        self._write(self.inner.save, key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self._write(self.inner.delete, key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._write(self.inner.move, src, dest, value)

    def _write(self, action: Callable[..., None], *args: bytes) -> None:
        try:
            action(*args)
        except Exception as exc:  # noqa: BLE001 - Redis down, out of memory, ...: said when the failure is read back
            self.last_error = error_line(exc)

    def __repr__(self) -> str:
        return f"CheckedSaves({self.inner!r})"


@dataclass
class Database:
    """An opened example database and how to name it to a user."""

    db: ExampleDatabase
    spec: str  # what the user passed (or the default), as it can be passed again (its password hidden)
    is_default: bool  # the directory plain `pytest` uses when no database is configured

    def describe(self) -> str:
        return self.spec + (" (Hypothesis's default directory)" if self.is_default else "")

    def not_kept(self, key: bytes, entries: Collection[bytes]) -> str | None:
        """Why none of ``entries`` (one failure's choice sequences) can be read back under ``key``
        (or where Hypothesis moves an entry once it has a smaller one); None if one can."""
        try:
            if self.holds(key, entries):
                return None
        except Exception as exc:  # noqa: BLE001 - any failure to read back is reported, not raised
            return f"it can't be read back: {error_line(exc)}"
        db = self.db.db if isinstance(self.db, BoundedDatabase) else self.db
        error = db.last_error if isinstance(db, CheckedSaves) else None
        inner = db.inner if isinstance(db, CheckedSaves) else db
        if error is None and isinstance(inner, DirectoryBasedExampleDatabase):
            error = _write_problem(Path(inner.path))
            if error is None:  # Hypothesis writes each entry in the temporary folder first
                tmp = tempfile.gettempdir()
                problem = _write_problem(Path(tmp))
                error = f"the temporary folder {tmp}: {problem}" if problem else None
        return error or "what was read back is not what was saved"

    def holds(self, key: bytes, entries: Collection[bytes]) -> bool:
        """Whether one of ``entries`` can be read back under ``key`` (or where Hypothesis moves an entry
        once it has a smaller one); raises what reading the database raises."""
        from fuzzdist.compat.hypothesis_internals import secondary_key

        return any(entry in entries for where in (key, secondary_key(key)) for entry in self.db.fetch(where))

    def too_large(self, key: bytes) -> int:
        """Entries of ``key`` left out because of their size (:class:`BoundedDatabase`)."""
        return self.db.too_large(key) if isinstance(self.db, BoundedDatabase) else 0


def too_large_note(what: str, n: int) -> str:
    """What a user is told of ``n`` entries of ``what`` left out because of their size."""
    return (
        f"{what}: {n} stored entr{'y' if n == 1 else 'ies'} larger than {MAX_ENTRY_BYTES:,} bytes skipped "
        "unread (no campaign writes one: someone else wrote it to the database)"
    )


def redact(text: str) -> str:
    """``text`` with the password of every Redis URL in it replaced by ``***``: what every output and
    message shows of a ``--database`` (``redis://:***@host/0``)."""
    for pattern in (_URL_PASSWORD, _QUERY_PASSWORD):
        text = pattern.sub(lambda m: m.group("head") + (REDACTED if m.group("password") else ""), text)
    return text


def read_password_file(path: str) -> str:
    """The Redis password in ``path`` (its first line); DatabaseError if the file can't be read or others
    can read it (a password file must be private: ``chmod 600``)."""
    data = read_private_file(
        path, f"the database password file {path}", "pass --database-password-file with", DatabaseError
    )
    lines = data.decode("utf-8", "surrogateescape").splitlines()
    if not lines or not lines[0].strip():
        raise DatabaseError(f"the database password file {path} is empty: put the Redis password on its first line")
    return lines[0].strip()


def default_spec() -> str:
    """Hypothesis's default example directory (``.hypothesis/examples``, or under
    ``$HYPOTHESIS_STORAGE_DIRECTORY``): what plain ``pytest`` reads and writes."""
    from hypothesis.configuration import storage_directory

    path = storage_directory("examples", intent_to_write=False).path
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)


def is_redis(spec: str) -> bool:
    return spec.startswith(REDIS_SCHEMES)


def open_database(
    spec: str | None, *, write: bool = True, must_exist: bool = False, password: str | None = None
) -> Database:
    """Open ``spec`` (a directory, or a ``redis://`` URL); raise DatabaseError if it can't be used.

    ``write``: check that a directory can be created and written.  ``must_exist``: a
    directory that does not exist is an error (replay: there is nothing to read).
    ``password``: a Redis URL's password given apart from it (``--database-password-file``).
    The Database's ``spec`` is the redacted one.
    """
    is_default = spec is None
    if spec is None:
        spec = default_spec()
    if not spec.strip():
        raise DatabaseError("--database is empty: pass a directory or a redis://HOST:PORT/DB URL")
    if is_redis(spec):
        return Database(BoundedDatabase(_open_redis(spec, password)), redact(spec), False)
    if "://" in spec:
        raise DatabaseError(
            f"--database {redact(spec)}: unknown URL scheme; pass a directory, "
            "or a redis://HOST:PORT/DB (rediss://, unix://) URL"
        )
    path = Path(spec).expanduser()
    is_default = is_default or path.resolve() == Path(default_spec()).resolve()
    if must_exist and not path.is_dir():
        raise DatabaseError(
            f"no example database at {spec} (no such directory): run `fuzzdist run` "
            "first, or pass --database with the directory or Redis URL a campaign used"
        )
    if write:
        reason = _write_problem(path, create=True)
        if reason is not None:
            raise DatabaseError(
                f"can't write the example database directory {spec} ({reason}): pass "
                "--database with a writable directory, or a redis://HOST:PORT URL"
            )
    return Database(BoundedDatabase(CheckedSaves(DirectoryBasedExampleDatabase(str(path)))), spec, is_default)


def _write_problem(path: Path, *, create: bool = False) -> str | None:
    """Why a file can't be written in the directory ``path`` (created first with ``create``); None if it can."""
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".fuzzdist-probe-")
        try:
            os.write(fd, b"x")  # a full disk refuses the bytes, not the name
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def error_line(exc: BaseException) -> str:
    """``Type: first line of its message``, as plain text (a Redis error quotes the key's raw bytes): an
    error of the database, said inside one line."""
    text = str(exc).strip()
    return one_line(f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__)


def redis_password(url: str, given: str | None = None) -> str | None:
    """The password to connect to ``url`` with: ``given`` (a password file), else the URL's own, else
    :data:`PASSWORD_ENV`; a URL whose password is ``***`` has none of its own."""
    if given:
        return given
    match = _URL_PASSWORD.search(url) or _QUERY_PASSWORD.search(url)
    own = match.group("password") if match else ""
    if own and own != REDACTED:
        from urllib.parse import unquote

        return unquote(own)
    env = os.environ.get(PASSWORD_ENV)
    if env:
        return env
    if own == REDACTED:
        raise DatabaseError(
            f"--database {redact(url)}: its password is hidden (***): set {PASSWORD_ENV} or pass "
            "--database-password-file with a file that holds it"
        )
    return None


def _without_password(url: str) -> str:
    """``url`` with its password left empty (the client is given it apart)."""
    for pattern in (_URL_PASSWORD, _QUERY_PASSWORD):
        url = pattern.sub(lambda m: m.group("head"), url)
    return url


def _open_redis(url: str, password: str | None = None) -> ExampleDatabase:
    shown = redact(url)
    try:
        import redis
    except ImportError:
        raise DatabaseError(
            f"--database {shown} needs the redis Python package: "
            "pip install redis (or pip install 'fuzzdist[campaign]')"
        ) from None
    password = redis_password(url, password)
    try:
        options = {"password": password} if password else {}
        client = redis.Redis.from_url(_without_password(url), socket_connect_timeout=5, socket_timeout=30, **options)
        client.ping()
    except (redis.exceptions.RedisError, ValueError, OSError) as exc:
        detail = redact(str(exc).strip().splitlines()[0]) if str(exc).strip() else type(exc).__name__
        if password:
            detail = detail.replace(password, REDACTED)
        raise DatabaseError(
            f"can't reach the Redis example database at {shown} ({detail}): start "
            "redis-server there, or pass another --database (a directory or redis:// URL)"
        ) from None
    return CheckedSaves(_redis_database(client))


def _redis_database(client: Any) -> ExampleDatabase:
    """Hypothesis's Redis database on ``client``, whose reads work on a server that refuses writes."""
    from hypothesis.extra.redis import RedisExampleDatabase

    db = RedisExampleDatabase(client, expire_after=REDIS_EXPIRE_AFTER, key_prefix=REDIS_KEY_PREFIX)
    return ReadableRedisDatabase(db, client)


class ReadableRedisDatabase(_ReadingDatabase):
    """Hypothesis's Redis database ``db``, whose fetch renews the key's expiry in the same transaction as
    the read: a server that refuses writes (out of memory, a read-only replica) would refuse the read
    too.  Then the entries are read alone, through ``client``: what is stored still replays, and the
    refused saves are said when read back."""

    def __init__(self, db: ExampleDatabase, client: Any) -> None:
        super().__init__(db)
        self.client = client

    def fetch(self, key: bytes) -> Iterable[bytes]:
        import redis

        try:
            entries = list(self.db.fetch(key))
        except redis.exceptions.ResponseError:  # the expiry's renewal refused, not the read
            entries = list(cast("set[bytes]", self.client.smembers(REDIS_KEY_PREFIX + key)))
        yield from entries


# ---------------------------------------------------------------------------------------
# The index: which pytest node a Hypothesis database key belongs to.


def record_in_index(db: ExampleDatabase, key: bytes, nodeid: str) -> None:
    """Note that ``key`` holds examples of ``nodeid`` (idempotent: the database stores sets)."""
    entry = json.dumps({"key": key.hex(), "nodeid": nodeid}, sort_keys=True).encode()
    db.save(INDEX_KEY, entry)


def read_index(db: ExampleDatabase) -> dict[str, set[bytes]]:
    """{node id: every database key a campaign filed failures of it under}."""
    index: dict[str, set[bytes]] = {}
    for raw in db.fetch(INDEX_KEY):
        try:
            entry = json.loads(raw)
            index.setdefault(entry["nodeid"], set()).add(bytes.fromhex(entry["key"]))
        except (ValueError, KeyError, TypeError):
            continue  # an entry from a newer fuzzdist, or damaged: ignore it
    return index


def reproduce_command(nodeid: str, database: Database, options: Sequence[str] = ()) -> str:
    """One shell command that replays ``nodeid``'s stored failures under plain pytest;
    ``options``: the pytest options the node id depends on (e.g. ``--fuzzdist-world-size=1``)."""
    words = ["pytest"]
    if not database.is_default:
        words += ["-p", "fuzzdist.campaign", f"--fuzzdist-database={database.spec}"]
    words += [nodeid, *options, "--hypothesis-profile=replay"]
    return " ".join(shlex.quote(word) for word in words)


def replay_command(nodeid: str, blob: str, options: Sequence[str] = ()) -> str:
    """One shell command that replays one failing example of ``nodeid`` with no database:
    ``fuzzdist replay`` of its ``@reproduce_failure`` ``blob``; ``options``: the pytest options the node id
    depends on, as :func:`reproduce_command` takes them."""
    words = ["fuzzdist", "replay", nodeid, "--blob", blob]
    for option in options:
        for pytest_flag, flag in (("--fuzzdist-world-size=", "--world-size"), ("--fuzzdist-timeout=", "--timeout")):
            if option.startswith(pytest_flag):
                words += [flag, option.removeprefix(pytest_flag)]
    return " ".join(shlex.quote(word) for word in words)
