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
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Sequence
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


@dataclass
class Database:
    """An opened example database and how to name it to a user."""

    db: ExampleDatabase
    spec: str  # what the user passed (or the default), as it can be passed again
    is_default: bool  # the directory plain `pytest` uses when no database is configured

    def describe(self) -> str:
        return self.spec + (" (Hypothesis's default directory)" if self.is_default else "")


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
        try:
            path.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(dir=path, prefix=".fuzzdist-probe-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise DatabaseError(f"can't write the example database directory {spec} ({reason}): pass "
                                "--database with a writable directory, or a redis://HOST:PORT URL") from None
    return Database(DirectoryBasedExampleDatabase(str(path)), spec, is_default)


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
    return RedisExampleDatabase(client, expire_after=REDIS_EXPIRE_AFTER)


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
