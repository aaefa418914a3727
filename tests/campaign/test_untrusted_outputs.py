"""What fuzzdist writes and prints holds no secret and can't be driven from outside.

A Redis URL's password is in no output (the JSON report, the HTML page, the JUnit file, the terminal);
it can be given apart from the command line.  What ``fuzzdist replay`` reads from a shared database
(node ids, examples) is printed as plain text, and an oversized entry is skipped, said so.
"""

from __future__ import annotations

import json
import sys

import pytest
from helpers.cli_helpers import CLI_TIMEOUT, cli_env, read_report, run_cli, write
from hypothesis.database import DirectoryBasedExampleDatabase

from fuzzdist.campaign.database import MAX_ENTRY_BYTES, record_in_index, redact
from fuzzdist.campaign.plain_text import one_line, plain

SECRET = "s3cret-Pw"

# `fuzzdist` with a stand-in for the Redis client: each connection's URL and password are noted in
# connections.jsonl, and the "Redis" database is the directory db/ (no redis-server needed).
FAKE_REDIS_CLI = """
import json, sys
import redis
import hypothesis.extra.redis as extra_redis
from hypothesis.database import DirectoryBasedExampleDatabase

class Client:
    def __init__(self, url, **kwargs):
        with open("connections.jsonl", "a") as f:
            f.write(json.dumps({"url": url, "password": kwargs.get("password")}) + "\\n")

    def ping(self):
        return True

if __name__ == "__main__":  # the ranks spawned re-import this module
    redis.Redis.from_url = classmethod(lambda cls, url, **kwargs: Client(url, **kwargs))
    extra_redis.RedisExampleDatabase = lambda client, **kwargs: DirectoryBasedExampleDatabase("db")
    from fuzzdist.cli import main
    sys.exit(main(sys.argv[1:]))
"""

ONE_BUG = """
from hypothesis import given, strategies as st

def check(ctx, n):
    if n >= 10:
        raise ValueError(f"planted: n={n}")

@given(n=st.integers(0, 10**9))
def test_bug(rank_pool, n):
    rank_pool.run(check, n)
"""


def _fake_redis_cli(tmp_path, args: list[str], env: dict | None = None):
    import subprocess

    write(tmp_path, "fake_redis_cli.py", FAKE_REDIS_CLI)
    return subprocess.run(
        [sys.executable, "fake_redis_cli.py", *args],
        cwd=tmp_path,
        text=True,
        capture_output=True,
        timeout=CLI_TIMEOUT,
        env={**cli_env(), **(env or {})},
    )


def _connections(tmp_path) -> list[dict]:
    path = tmp_path / "connections.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    "url, shown",
    [
        ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://alice:p@ss@host/1", "rediss://alice:***@host/1"),
        ("redis://host/0?password=s3cret&db=1", "redis://host/0?password=***&db=1"),
        ("unix://:s3cret@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
        ("--database=redis://:s3cret@host/0", "--database=redis://:***@host/0"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("db/examples", "db/examples"),
    ],
)
def test_redact_hides_every_redis_password(url, shown):
    assert redact(url) == shown


def test_a_redis_password_is_in_no_output_and_the_reproduce_command_hides_it(tmp_path):
    write(tmp_path, "test_one.py", ONE_BUG)
    url = f"redis://:{SECRET}@127.0.0.1:6390/0"
    result = _fake_redis_cli(
        tmp_path,
        [
            "run",
            "test_one.py",
            "--database",
            url,
            "--max-examples",
            "30",
            "--world-size",
            "1",
            "--report",
            "r.json",
            "--html",
            "r.html",
            "--junit",
            "j.xml",
        ],
    )
    assert result.returncode == 1, result.stdout + result.stderr
    for name in ("r.json", "r.html", "j.xml"):
        assert SECRET not in (tmp_path / name).read_text(encoding="utf-8"), name
    assert SECRET not in result.stdout + result.stderr
    report = read_report(tmp_path / "r.json")
    assert report["database"] == "redis://:***@127.0.0.1:6390/0"
    assert "--database" in report["command"] and "redis://:***@127.0.0.1:6390/0" in report["command"]
    [failure] = report["properties"][0]["failures"]
    assert "--fuzzdist-database=redis://:***@127.0.0.1:6390/0" in failure["reproduce"]
    # The client got the password, apart from the URL.
    assert _connections(tmp_path) == [{"url": "redis://:@127.0.0.1:6390/0", "password": SECRET}]


def test_a_password_file_gives_the_password_and_one_others_can_read_is_refused(tmp_path):
    write(tmp_path, "test_one.py", ONE_BUG)
    secret_file = write(tmp_path, "redis.pw", SECRET + "\n")
    secret_file.chmod(0o644)
    args = ["replay", "test_one.py", "--database", "redis://127.0.0.1:6390/0", "--database-password-file", "redis.pw"]
    refused = _fake_redis_cli(tmp_path, args)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.count("\n") == 1 and "chmod 600 redis.pw" in refused.stderr, refused.stderr
    assert _connections(tmp_path) == []  # refused before anything ran
    secret_file.chmod(0o600)
    result = _fake_redis_cli(tmp_path, args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _connections(tmp_path) == [{"url": "redis://127.0.0.1:6390/0", "password": SECRET}]


def test_a_redacted_url_takes_its_password_from_the_environment_or_says_where_to_give_it(tmp_path):
    write(tmp_path, "test_one.py", ONE_BUG)
    args = ["replay", "test_one.py", "--database", "redis://:***@127.0.0.1:6390/0"]
    missing = _fake_redis_cli(tmp_path, args, env={"FUZZDIST_REDIS_PASSWORD": ""})
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "FUZZDIST_REDIS_PASSWORD" in missing.stderr and "--database-password-file" in missing.stderr
    result = _fake_redis_cli(tmp_path, args, env={"FUZZDIST_REDIS_PASSWORD": SECRET})
    assert result.returncode == 0, result.stdout + result.stderr
    assert _connections(tmp_path) == [{"url": "redis://:@127.0.0.1:6390/0", "password": SECRET}]
    assert SECRET not in result.stdout + result.stderr


# -- strings from outside ----------------------------------------------------------------------


def test_plain_escapes_what_could_drive_a_terminal_and_keeps_lines():
    hostile = "a\x1b]0;title\x07b\x1b[2K\r\x9b\u202ec\udcff"
    assert plain(hostile) == "a\\x1b]0;title\\x07b\\x1b[2K\\r\\x9b\\u202ec\\udcff"
    assert plain("line 1\n\tline 2") == "line 1\n\tline 2"
    assert one_line("a\nb\tc") == "a\\nb\\tc"


PLAIN_PROPERTY = """
from hypothesis import given, strategies as st

@given(n=st.integers())
def test_p(n):
    pass
"""


def test_replay_prints_a_hostile_node_id_as_plain_text_and_skips_an_oversized_entry(tmp_path):
    write(tmp_path, "test_h.py", PLAIN_PROPERTY)
    db = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    evil = "test_h.py::test_gone\x1b]0;pwned\x07\x1b[2K\rFAKE\nFAILS"
    record_in_index(db, b"k1", evil)
    db.save(b"k1", b"\x00")
    record_in_index(db, b"k2", "test_h.py::test_p")
    db.save(b"k2", b"x" * (MAX_ENTRY_BYTES + 1))
    result = run_cli(["replay", "test_h.py", "--database", "db"], cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert not any(c in out for c in "\x1b\x07\r"), out
    assert "GONE            test_h.py::test_gone\\x1b]0;pwned\\x07\\x1b[2K\\rFAKE\\nFAILS: 1 stored" in out, out
    assert (
        f"TOO LARGE       test_h.py::test_p: 1 stored entry larger than {MAX_ENTRY_BYTES:,} bytes skipped unread"
    ) in out, out
    assert "1 too large to read (skipped)" in out, out
    assert list(db.fetch(b"k2")) == [b"x" * (MAX_ENTRY_BYTES + 1)]  # left in the database, as it was


def test_the_campaign_summary_prints_drawn_text_as_plain_text():
    from fuzzdist.campaign.report import CampaignState, FailureRecord, PropertyState, summary_text

    state = CampaignState(
        command=["fuzzdist", "run"], device="cpu", database="db", duration_s=None, max_examples=10, world_size=None
    )
    prop = state.properties["t.py::test_x"] = PropertyState("t.py::test_x", status="failed")
    prop.failures["o"] = FailureRecord(
        origin="o",
        kind="failure",
        summary="ValueError: \x1b]0;pwned\x07",
        example="test_x(s='\x1b[2J')\nDraw 1: '\x9b1m'",
        shrunk=True,
    )
    text = summary_text(state, None, None)
    assert not any(c in text for c in "\x1b\x07\x9b"), text
    assert "ValueError: \\x1b]0;pwned\\x07" in text and "Draw 1: '\\x9b1m'" in text


def test_a_progress_line_prints_a_failure_message_as_one_plain_line():
    import io

    from fuzzdist.campaign.progress import PlainProgress
    from fuzzdist.campaign.report import CampaignState, PropertyState

    state = CampaignState(
        command=["fuzzdist", "run"], device="cpu", database="db", duration_s=None, max_examples=10, world_size=None
    )
    stream = io.StringIO()
    PlainProgress(stream).new_failure(state, PropertyState("t.py::test_x"), "ValueError: \x1b[2K\rfake\nline", False)
    assert stream.getvalue().endswith("new failure in t.py::test_x: ValueError: \\x1b[2K\\rfake\\nline\n")


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b1m[bold red]MARKUP[/]"  # a terminal title, an erase, a CSI, rich markup


def test_the_live_display_shows_outside_strings_as_plain_text():
    """The rich table: a property's name, its events, the database's name, a failure's message and a note
    are shown as they are written (no markup applied), their control characters escaped."""
    import io

    pytest.importorskip("rich")
    from fuzzdist.campaign.progress import RichProgress
    from fuzzdist.campaign.report import CampaignState, PropertyState

    state = CampaignState(
        command=["fuzzdist", "run"],
        device="cpu",
        database="db" + HOSTILE,
        duration_s=None,
        max_examples=10,
        world_size=None,
    )
    nodeid = "t.py::test_x" + HOSTILE
    prop = state.properties[nodeid] = PropertyState(nodeid, status="running")
    prop.events["label" + HOSTILE] = 3
    stream = io.StringIO()
    progress = RichProgress(stream)
    progress.console.width = 2000  # nothing folded: each string on one line of the table
    progress.start(state)
    progress.new_failure(state, prop, "ValueError: " + HOSTILE, False)
    progress.note(state, "note " + HOSTILE)
    progress.stop(state)
    out = stream.getvalue()
    assert not any(seq in out for seq in ("\x1b]0;", "\x07", "\x1b[2J", "\x9b")), repr(out)
    shown = "\\x1b]0;pwned\\x07\\x1b[2J\\x9b1m[bold red]MARKUP[/]"
    for what in ("db", "t.py::test_x", "label", "ValueError: ", "note "):
        assert what + shown in out, (what, repr(out))


def test_jobs_workers_get_the_password_file_not_the_password():
    import argparse

    from fuzzdist.campaign.jobs import worker_argv

    args = argparse.Namespace(
        targets=[],
        schedule="adaptive",
        duration=None,
        max_examples=5,
        seed=None,
        device="cpu",
        database="redis://host/0",
        database_password_file="redis.pw",
        world_size=None,
        timeout=None,
        cover=None,
    )
    argv = worker_argv(args, 0, 2, "w0.json", "w0.xml")
    assert argv[argv.index("--database-password-file") + 1] == "redis.pw"


def test_an_unreachable_redis_is_one_line_without_its_password(tmp_path, monkeypatch, capsys):
    pytest.importorskip("redis")
    from helpers.cli_helpers import free_port

    from fuzzdist.cli import main

    monkeypatch.chdir(tmp_path)
    write(tmp_path, "test_one.py", ONE_BUG)
    port = free_port()  # nothing listens there
    assert main(["run", "test_one.py", "--database", f"redis://:{SECRET}@127.0.0.1:{port}/0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"redis://:***@127.0.0.1:{port}/0" in err and SECRET not in err, err


def test_a_campaign_leaves_an_oversized_entry_unread_and_says_so(tmp_path):
    write(tmp_path, "test_h.py", PLAIN_PROPERTY)
    args = [
        "run",
        "test_h.py",
        "--max-examples",
        "5",
        "--database",
        "db",
        "--report",
        "r.json",
        "--junit",
        "",
        "--progress",
        "plain",
    ]
    first = run_cli(args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    key = bytes.fromhex(read_report(tmp_path / "r.json")["properties"][0]["database_key"])
    DirectoryBasedExampleDatabase(str(tmp_path / "db")).save(key, b"x" * (MAX_ENTRY_BYTES + 1))
    result = run_cli(args, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"test_h.py::test_p: 1 stored entry larger than {MAX_ENTRY_BYTES:,} bytes skipped unread" in result.stdout, (
        result.stdout
    )


def test_a_database_path_with_a_non_utf8_byte_gets_its_page_written_and_read_back(tmp_path):
    """Python reads the byte as a lone surrogate (db\\udcff): JSON keeps it, UTF-8 can't; shown escaped."""
    import subprocess

    write(tmp_path, "test_h.py", PLAIN_PROPERTY)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzzdist",
            "run",
            "test_h.py",
            "--max-examples",
            "5",
            "--database",
            b"db\xff",
            "--report",
            "r.json",
            "--html",
            "r.html",
            "--junit",
            "",
        ],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        timeout=CLI_TIMEOUT,
    )
    out = run.stdout.decode("utf-8", "replace")
    assert run.returncode == 0 and "NOT WRITTEN" not in out, out + run.stderr.decode("utf-8", "replace")
    assert "db\\udcff" in (tmp_path / "r.html").read_text(encoding="utf-8")
    again = run_cli(["report", "r.json", "--html", "again.html"], cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "db\\udcff" in (tmp_path / "again.html").read_text(encoding="utf-8")
