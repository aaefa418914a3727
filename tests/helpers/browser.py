"""Load a page in a real headless Chromium and report what a person would see go wrong (test-only).

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages ended by a NUL byte, commands on fd 3, replies and events on fd 4),
so no websocket client is needed.  Unlike ``--dump-dom`` with
``--enable-logging=stderr`` (which logs console.error at INFO and never logs a
resource that failed to load), the protocol tells errors from other messages and
reports every request the page made.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

import pytest

TIMEOUT = 60.0  # seconds for the whole load; every wait below is bounded by it
BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
REQUIRE_ENV = "FUZZDIST_REQUIRE_CHROMIUM"  # set (CI does): no Chromium fails the browser tests instead of skipping

# What the page reports about itself once loaded.
_PAGE_FACTS = """JSON.stringify({
  title: document.title,
  ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
  counts: Object.fromEntries(['section.property', '.failure', '.pair-grid', 'td.never', '.chart svg', 'script']
      .map(s => [s, document.querySelectorAll(s).length])),
  text: document.body ? document.body.innerText : '',
  width: document.documentElement.scrollWidth,
  height: document.documentElement.scrollHeight,
})"""


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) binary on PATH, or None."""
    for name in BINARIES:
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_or_skip() -> str:
    """The Chromium binary for a test; without one the test is skipped, or fails where $FUZZDIST_REQUIRE_CHROMIUM
    is set to anything but "" or "0" (CI sets it, so that a failed install can't silently drop the check)."""
    path = find_chromium()
    if path is not None:
        return path
    why = f"no chromium binary on PATH (looked for {', '.join(BINARIES)}; Debian: apt-get install chromium)"
    required = os.environ.get(REQUIRE_ENV, "")
    if required not in ("", "0"):
        pytest.fail(f"{REQUIRE_ENV}={required} but {why}", pytrace=False)
    pytest.skip(why)


@dataclass
class PageLoad:
    """What loading one page showed."""

    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, failed loads
    requests: list[str] = field(default_factory=list)  # every URL the page asked for (itself included)
    facts: dict = field(default_factory=dict)  # _PAGE_FACTS
    screenshot: bytes = b""  # PNG of the whole page


class _Pipe:
    """One DevTools connection over the browser's pipe; events are kept in order as they come."""

    def __init__(self, proc: subprocess.Popen, send_fd: int, recv_fd: int) -> None:
        self.proc, self.send_fd, self.recv_fd = proc, send_fd, recv_fd
        self.messages: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        self._id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self.recv_fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.messages.put(None)
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                self.messages.put(json.loads(raw))

    def call(
        self, method: str, params: dict | None = None, session: str | None = None, deadline: float | None = None
    ) -> dict:
        self._id += 1
        message: dict = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.send_fd, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._next(deadline, f"the reply to {method}")
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise AssertionError(f"DevTools {method} failed: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, deadline: float) -> dict:
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._next(deadline, method)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def _next(self, deadline: float | None, what: str) -> dict:
        left = (deadline or time.monotonic() + TIMEOUT) - time.monotonic()
        try:
            message = self.messages.get(timeout=max(0.0, left))
        except queue.Empty:
            raise AssertionError(f"headless chromium sent no {what} within {TIMEOUT:g}s") from None
        if message is None:
            raise AssertionError(
                f"headless chromium closed its pipe while waiting for {what} (exit code {self.proc.poll()})"
            )
        return message


def load(url: str, chromium: str, width: int = 1280, settle_s: float = 0.5) -> PageLoad:
    """Open ``url`` in a fresh headless ``chromium``; what it logged, requested and looked like."""
    deadline = time.monotonic() + TIMEOUT
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    # Above 4, so that the shell's `3<&A 4>&B` can't overwrite one end with the other.
    to_browser_r, from_browser_w = _above_4(to_browser_r), _above_4(from_browser_w)
    profile = tempfile.mkdtemp(prefix="fuzzdist-chromium-")
    args = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--remote-debugging-pipe",
        "--no-first-run",
        "--no-default-browser-check",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the browser; chromium's stderr, for the message when it fails
    # The browser reads commands on fd 3 and writes to fd 4 (bash: dash takes no fd number above 9).
    proc = subprocess.Popen(
        ["bash", "-c", f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w}', "bash", *args],
        pass_fds=(to_browser_r, from_browser_w),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
    )  # see _end
    os.close(to_browser_r)
    os.close(from_browser_w)
    pipe = _Pipe(proc, to_browser_w, from_browser_r)
    result = PageLoad()
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"}, deadline=deadline)["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True}, deadline=deadline)[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Network", "Page"):
            pipe.call(f"{domain}.enable", session=session, deadline=deadline)
        pipe.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session=session,
            deadline=deadline,
        )
        pipe.events.clear()  # about:blank's
        pipe.call("Page.navigate", {"url": url}, session=session, deadline=deadline)
        pipe.wait_event("Page.loadEventFired", deadline)
        time.sleep(settle_s)  # late errors (timers, lazy loads) arrive as events with the next replies
        facts = pipe.call(
            "Runtime.evaluate", {"expression": _PAGE_FACTS, "returnByValue": True}, session=session, deadline=deadline
        )
        result.facts = json.loads(facts["result"]["value"])
        height = min(int(result.facts["height"]), 16000)
        pipe.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
            deadline=deadline,
        )
        shot = pipe.call("Page.captureScreenshot", {"format": "png"}, session=session, deadline=deadline)
        result.screenshot = base64.b64decode(shot["data"])
        for event in pipe.events:
            result.errors += _errors(event)
            if event.get("method") == "Network.requestWillBeSent":
                result.requests.append(event["params"]["request"]["url"])
        return result
    except (AssertionError, OSError) as exc:
        log.seek(0)
        lines = [line for line in log.read().decode(errors="replace").splitlines() if "dbus" not in line]
        raise AssertionError(f"{exc}\nchromium's stderr (D-Bus noise left out):\n" + "\n".join(lines[-30:])) from None
    finally:
        try:
            pipe.call("Browser.close", deadline=min(deadline, time.monotonic() + 5))
        except (AssertionError, OSError):
            pass
        _end(proc)
        os.close(to_browser_w)
        os.close(from_browser_r)
        log.close()
        shutil.rmtree(profile, ignore_errors=True)


def _end(proc: subprocess.Popen) -> None:
    """Chromium's renderers and zygote can outlive its main process: once that has ended (or after 10 s), SIGKILL
    its whole session's group, before reaping it, so that the group's id can't belong to anyone else yet."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                break  # ended, not reaped
        except ChildProcessError:
            break
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


def _above_4(fd: int) -> int:
    """``fd`` moved to a number above 4 (the original closed)."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 5)
    os.close(fd)
    return moved


def _errors(event: dict) -> list[str]:
    """The errors a DevTools event reports: console.error/assert, uncaught exceptions, failed loads."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
        return [f"console.{params['type']}: {text}"]
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        return [f"uncaught: {details.get('exception', {}).get('description') or details.get('text')}"]
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        entry = params["entry"]
        return [f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip()]
    if method == "Network.loadingFailed" and not params.get("canceled"):
        return [f"failed to load: {params.get('errorText')}"]
    return []
