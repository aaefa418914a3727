"""Helpers for fuzzdist's own tests of the `fuzzdist` command: run it, read its report, start Redis
(test-only: not shipped in the wheel)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

CLI_TIMEOUT = 180  # seconds: a hung CLI fails its test instead of hanging the suite


def cli_env() -> dict:
    env = dict(os.environ)
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_cli(args: list[str], cwd, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess:
    """``python -m fuzzdist ARGS`` in ``cwd``; stdout and stderr as text."""
    return subprocess.run(
        [sys.executable, "-m", "fuzzdist", *args],
        cwd=cwd,
        env=cli_env(),
        text=True,
        capture_output=True,
        timeout=timeout,
    )


def start_cli(args: list[str], cwd) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fuzzdist", *args],
        cwd=cwd,
        env=cli_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(proc: subprocess.Popen, timeout: float = CLI_TIMEOUT) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if hasattr(signal, "SIGUSR1"):
            proc.send_signal(signal.SIGUSR1)  # the CLI dumps every thread's stack to stderr
            time.sleep(2)
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"fuzzdist did not finish within {timeout}s\nstdout:\n{out}\nstderr:\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def read_report(path) -> dict:
    """The JSON report; raises if it is not valid JSON (it must be, whenever it exists)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def wait_for_report(path, predicate, proc: subprocess.Popen | None = None, timeout: float = 120) -> dict:
    """Poll the report until ``predicate(report)``; every version read must be valid JSON."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"fuzzdist exited ({proc.returncode}) early\nstdout:\n{out}\nstderr:\n{err}")
        if os.path.exists(path):
            report = read_report(path)
            if predicate(report):
                return report
        time.sleep(0.1)
    raise AssertionError(f"the report {path} did not reach the expected state within {timeout}s")


def stored(database_dir, key_hex: str) -> list[bytes]:
    """The failing examples a directory database holds under a test's key."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    return list(DirectoryBasedExampleDatabase(str(database_dir)).fetch(bytes.fromhex(key_hex)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def redis_server(tmpdir, password: str | None = None):
    """A throwaway redis-server on 127.0.0.1 (a free port), asking for ``password`` if given; yields its URL
    (without the password); stopped after."""
    import pytest

    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    pytest.importorskip("redis", reason="the redis Python package is not installed (pip install redis)")
    import redis

    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmpdir)]
        + (["--requirepass", password] if password else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, password=password)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"redis-server did not start on port {port}") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def write(directory, name: str, source: str) -> Path:
    path = Path(directory) / name
    path.write_text(source, encoding="utf-8")
    return path
