"""A database that can't be read once the rounds have started is the campaign's error, never the property's.

Hypothesis reads the example database at the start of every run, inside its engine, and lets what the
backend raises out as is: without a type of its own, a Redis server gone between fuzzdist's own read and
Hypothesis's would be filed (and reported) as a failure of the property.
"""

from __future__ import annotations

import subprocess
import sys

from helpers.cli_helpers import CLI_TIMEOUT, cli_env, read_report, write

# `fuzzdist` with a stand-in Redis client whose database (the directory db/) answers fuzzdist's own reads
# but refuses the ones Hypothesis's engine makes: the server going away between the two.
GOING_AWAY_CLI = """
import sys
import redis
import hypothesis.extra.redis as extra_redis
from hypothesis.database import DirectoryBasedExampleDatabase

class Client:
    def __init__(self, url, **kwargs):
        pass

    def ping(self):
        return True

class GoingAway(DirectoryBasedExampleDatabase):
    def fetch(self, key):
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_globals.get("__name__", "").startswith("hypothesis.internal.conjecture"):
                raise redis.exceptions.ConnectionError("Connection closed by server.")
            frame = frame.f_back
        return super().fetch(key)

if __name__ == "__main__":  # the ranks spawned re-import this module
    redis.Redis.from_url = classmethod(lambda cls, url, **kwargs: Client(url, **kwargs))
    extra_redis.RedisExampleDatabase = lambda client, **kwargs: GoingAway("db")
    from fuzzdist.cli import main
    sys.exit(main(sys.argv[1:]))
"""

PASSES = """
from hypothesis import given, strategies as st

def check(ctx, n):
    return n

@given(n=st.integers(0, 10))
def test_fine(rank_pool, n):
    rank_pool.run(check, n)
"""


def test_a_database_gone_inside_hypothesiss_read_is_the_campaigns_error_not_the_propertys_failure(tmp_path):
    write(tmp_path, "going_away_cli.py", GOING_AWAY_CLI)
    write(tmp_path, "test_one.py", PASSES)
    run = subprocess.run(
        [
            sys.executable,
            "going_away_cli.py",
            "run",
            "test_one.py",
            "--world-size",
            "1",
            "--max-examples",
            "5",
            "--database",
            "redis://127.0.0.1:1/0",
            "--report",
            "r.json",
            "--junit",
            "",
            "--progress",
            "plain",
        ],
        cwd=tmp_path,
        text=True,
        capture_output=True,
        timeout=CLI_TIMEOUT,
        env=cli_env(),
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    [prop] = read_report(tmp_path / "r.json")["properties"]
    assert prop["failures"] == [], out  # nothing false is reported, or saved
    assert prop["status"] == "error", out
    assert prop["reason"].startswith("can't read the example database redis://127.0.0.1:1/0: "), prop["reason"]
    assert "Connection closed by server." in prop["reason"]
    assert "Traceback" not in out
