"""The Redis example database against a real redis-server (skipped, with the reason, where none is
installed): a server that asks for a password, and one that refuses writes halfway.

The stand-in client of ``test_untrusted_outputs.py`` shows what fuzzdist passes to the client; these show
that a real server takes it, keeps what a campaign found, and that what it refuses is said NOT SAVED and
replayed from the report alone.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from helpers.cli_helpers import CLI_TIMEOUT, cli_env, read_report, redis_server, write

SECRET = "s3cret-Pw-real"

ONE_BUG = """
from hypothesis import given, strategies as st

def check(ctx, n):
    if n >= 10:
        raise ValueError(f"planted: n={n}")

@given(n=st.integers(0, 10**9))
def test_bug(rank_pool, n):
    rank_pool.run(check, n)
"""


def _cli(tmp_path, args: list[str], **environ: str) -> subprocess.CompletedProcess:
    """``python -m fuzzdist ARGS`` in ``tmp_path``, with ``environ`` added to its environment."""
    return subprocess.run(
        [sys.executable, "-m", "fuzzdist", *args],
        cwd=tmp_path,
        env=dict(cli_env(), **environ),
        text=True,
        capture_output=True,
        timeout=CLI_TIMEOUT,
    )


def _run(url: str) -> list[str]:
    return ["run", "test_one.py", "--world-size", "1", "--max-examples", "30", "--database", url, "--progress", "plain"]


def test_a_server_with_a_password_keeps_the_failure_and_no_output_holds_the_password(tmp_path):
    write(tmp_path, "test_one.py", ONE_BUG)
    with redis_server(tmp_path, password=SECRET) as url:
        without = _cli(tmp_path, [*_run(url), "--report", "none.json"], FUZZDIST_REDIS_PASSWORD="")
        assert without.returncode == 2, without.stdout + without.stderr
        assert "can't reach the Redis example database" in without.stderr and len(without.stderr.splitlines()) == 1
        run = _cli(tmp_path, [*_run(url), "--report", "r.json", "--junit", "j.xml"], FUZZDIST_REDIS_PASSWORD=SECRET)
        assert run.returncode == 1, run.stdout + run.stderr
        [failure] = read_report(tmp_path / "r.json")["properties"][0]["failures"]
        assert failure["saved"] is True  # read back from the server
        pw = write(tmp_path, "redis.pw", SECRET + "\n")
        os.chmod(pw, 0o600)
        replay = _cli(
            tmp_path,
            ["replay", "test_one.py", "--world-size", "1", "--database", url, "--database-password-file", "redis.pw"],
            FUZZDIST_REDIS_PASSWORD="",
        )
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "FAILS" in replay.stdout and "planted: n=10" in replay.stdout
    for text in (
        run.stdout,
        run.stderr,
        replay.stdout,
        replay.stderr,
        (tmp_path / "r.json").read_text(),
        (tmp_path / "j.xml").read_text(),
    ):
        assert SECRET not in text


def test_a_server_that_refuses_writes_is_said_and_the_report_alone_replays_the_failure(tmp_path):
    """A server out of memory (noeviction) answers reads and refuses writes: the failure the campaign
    found is said NOT SAVED, exit 4, and its replay line works with no database."""
    import redis

    write(tmp_path, "test_one.py", ONE_BUG)
    with redis_server(tmp_path) as url:
        client = redis.Redis.from_url(url)
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", 1)  # below what the server already uses: every write is refused
        run = _cli(tmp_path, [*_run(url), "--report", "r.json", "--junit", ""])
        assert client.dbsize() == 0
    assert run.returncode == 4, run.stdout + run.stderr
    [failure] = read_report(tmp_path / "r.json")["properties"][0]["failures"]
    assert failure["saved"] is False and failure["not_saved"].startswith("OutOfMemoryError: ")
    assert not any(ord(c) < 0x20 for c in failure["not_saved"])  # the key's raw bytes it quotes, escaped
    assert "NOT SAVED" in run.stdout and failure["replay"] in run.stdout
    assert failure["replay"].startswith("fuzzdist replay ") and " --blob " in failure["replay"]
    args = shlex.split(failure["replay"])[1:]  # the server is gone: the report alone replays it
    replay = _cli(tmp_path, [*args, "--database", str(tmp_path / "empty-db")])
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "planted: n=10" in replay.stdout


def test_a_server_that_refuses_reads_is_the_campaigns_error_not_a_pass(tmp_path):
    """A server that answers but won't let this user read (an ACL): the property can't replay what is
    stored, so the campaign says why and exits 1; it never reads as a pass with nothing run."""
    import redis

    write(tmp_path, "test_one.py", ONE_BUG)
    with redis_server(tmp_path) as url:
        redis.Redis.from_url(url).execute_command("ACL", "SETUSER", "default", "-@read")
        run = _cli(tmp_path, [*_run(url), "--report", "r.json", "--junit", ""])
    assert run.returncode == 1, run.stdout + run.stderr
    [prop] = read_report(tmp_path / "r.json")["properties"]
    assert prop["status"] == "error" and prop["reason"].startswith(f"can't read the example database {url}: ")
    assert "NoPermissionError" in prop["reason"] and prop["reason"] in run.stdout
