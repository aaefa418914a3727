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
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from fuzzdist.errors import DatabaseError

INDEX_KEY = b"fuzzdist.index.v1"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
# Hypothesis's RedisExampleDatabase lets keys expire 8 days after their last use; a
# fleet's findings should outlive a long weekend and a holiday, so keep them a year.
REDIS_EXPIRE_AFTER = timedelta(days=365)


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
        except Exception as exc:  # Redis down, out of memory, ...: said when the failure is read back
            self.last_error = _one_line(exc)

    def __repr__(self) -> str:
        return f"CheckedSaves({self.inner!r})"


@dataclass
class Database:
    """An opened example database and how to name it to a user."""

    db: ExampleDatabase
    spec: str  # what the user passed (or the default), as it can be passed again
    is_default: bool  # the directory plain `pytest` uses when no database is configured

    def describe(self) -> str:
        return self.spec + (" (Hypothesis's default directory)" if self.is_default else "")

    def not_kept(self, key: bytes, entries: Collection[bytes]) -> str | None:
        """Why none of ``entries`` (one failure's choice sequences) can be read back under ``key``
        (or where Hypothesis moves an entry once it has a smaller one); None if one can."""
        from fuzzdist.compat.hypothesis_internals import secondary_key

        try:
            for where in (key, secondary_key(key)):
                if any(entry in entries for entry in self.db.fetch(where)):
                    return None
        except Exception as exc:
            return f"it can't be read back: {_one_line(exc)}"
        db = self.db
        error = db.last_error if isinstance(db, CheckedSaves) else None
        inner = db.inner if isinstance(db, CheckedSaves) else db
        if error is None and isinstance(inner, DirectoryBasedExampleDatabase):
            error = _write_problem(Path(inner.path))
            if error is None:  # Hypothesis writes each entry in the temporary folder first
                tmp = tempfile.gettempdir()
                problem = _write_problem(Path(tmp))
                error = f"the temporary folder {tmp}: {problem}" if problem else None
        return error or "what was read back is not what was saved"


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


def open_database(spec: str | None, *, write: bool = True, must_exist: bool = False) -> Database:
    """Open ``spec`` (a directory, or a ``redis://`` URL); raise DatabaseError if it can't be used.

    ``write``: check that a directory can be created and written.  ``must_exist``: a
    directory that does not exist is an error (replay: there is nothing to read).
    """
    is_default = spec is None
    if spec is None:
        spec = default_spec()
    if not spec.strip():
        raise DatabaseError("--database is empty: pass a directory or a redis://HOST:PORT/DB URL")
    if is_redis(spec):
        return Database(_open_redis(spec), spec, False)
    if "://" in spec:
        raise DatabaseError(f"--database {spec}: unknown URL scheme; pass a directory, "
                            "or a redis://HOST:PORT/DB (rediss://, unix://) URL")
    path = Path(spec).expanduser()
    is_default = is_default or path.resolve() == Path(default_spec()).resolve()
    if must_exist and not path.is_dir():
        raise DatabaseError(f"no example database at {spec} (no such directory): run `fuzzdist run` "
                            "first, or pass --database with the directory or Redis URL a campaign used")
    if write:
        reason = _write_problem(path, create=True)
        if reason is not None:
            raise DatabaseError(f"can't write the example database directory {spec} ({reason}): pass "
                                "--database with a writable directory, or a redis://HOST:PORT URL")
    return Database(CheckedSaves(DirectoryBasedExampleDatabase(str(path))), spec, is_default)


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


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _open_redis(url: str) -> ExampleDatabase:
    try:
        import redis
    except ImportError:
        raise DatabaseError(f"--database {url} needs the redis Python package: "
                            "pip install redis (or pip install 'fuzzdist[campaign]')") from None
    from hypothesis.extra.redis import RedisExampleDatabase

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
        client.ping()
    except (redis.exceptions.RedisError, ValueError, OSError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseError(f"can't reach the Redis example database at {url} ({detail}): start "
                            "redis-server there, or pass another --database (a directory or redis:// URL)") from None
    return CheckedSaves(RedisExampleDatabase(client, expire_after=REDIS_EXPIRE_AFTER))


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
