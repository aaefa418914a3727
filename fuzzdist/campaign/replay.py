"""``fuzzdist replay``: re-execute the failing examples stored in the example database.

For each selected property, every example stored under its current
Hypothesis key (the minimal failing examples a campaign or plain pytest
saved; if it holds nothing, those stored under the key its rank-pool variants
shared before each had its own, as plain pytest would: fuzzdist.driver.variant_keys),
and every example stored under a key fuzzdist's index recorded for
the same test before its source changed, is run exactly once, the way
``@reproduce_failure`` runs one: no generation, no shrinking, and the
database is only read, never changed.  Each one is reported as

- **FAILS**: still fails; with the minimal example, each failing rank's
  traceback, and a pytest command that reproduces it (``--export`` adds an
  ``@example(...)`` line that pins it as a regression test);
- **PASSES**: no longer fails (the bug was fixed, or it was flaky);
- **KNOWN**: fails only with known torch bugs (``fuzzdist.known_bugs``), listed;
- **DOESN'T FIT**: the stored choices no longer fit the test's strategies;
- **TOO LARGE**: stored entries larger than ``database.MAX_ENTRY_BYTES``, skipped unread
  (no campaign writes one; decoding one costs many times its size);

``--export-script DIR`` also writes each failure that still fails as a standalone script
(:mod:`fuzzdist.campaign.export_script`);

and properties with stored failures under an older version of the test,
and index entries for tests that no longer exist, are reported as such.
"""

from __future__ import annotations

import ast
import shlex
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO, cast

import pytest

from fuzzdist import known_bugs
from fuzzdist.campaign.database import Database, read_index, replay_command, reproduce_command, too_large_note
from fuzzdist.campaign.export_script import ExportDir, Recording, failure_of, render, script_stem, wrap_pools
from fuzzdist.campaign.plain_text import one_line, plain
from fuzzdist.campaign.selection import SelectionPlugin, Targets
from fuzzdist.compat import hypothesis_internals as hc
from fuzzdist.compat.pytest_internals import Failed, OutcomeException, call_arguments
from fuzzdist.driver.variant_keys import fallback, keyed_by_hypothesis, parametrized_by_pool, shared_key

_HIDDEN_FRAMES = ("/hypothesis/", "/_pytest/", "/pluggy/", "/fuzzdist/campaign/")


def database_key(item: pytest.Function) -> bytes:
    """Hypothesis's database key for ``item``, as pytest's hypothesis plugin makes it: the
    digest of the test, plus the node id for a test pytest parametrizes itself or fuzzdist's
    plugin runs on several rank pools (``fuzzdist.driver.plugin.pytest_runtest_call``)."""
    inner = item.obj.hypothesis.inner_test
    if not (keyed_by_hypothesis(item) or parametrized_by_pool(item)):
        return hc.function_digest(inner)
    return hc.digest_with(inner, item.nodeid.encode())


def _sorted_entries(entries) -> list[bytes]:
    return sorted(entries, key=lambda b: (len(b), b))  # Hypothesis's shortlex: simplest first


class ReplayPlugin(SelectionPlugin):
    def __init__(
        self,
        targets: Targets,
        *,
        database: Database,
        stream: TextIO,
        export: bool = False,
        device: str | None = None,
        pytest_options: Sequence[str] = (),
        export_dir: ExportDir | None = None,
        blob: str | None = None,
    ) -> None:
        super().__init__(targets, device)
        self.blob = blob  # --blob: replay this one example (a @reproduce_failure blob), not the database's
        self.export_dir = export_dir  # --export-script: where each failing example's script goes
        self._exported: Counter = Counter()  # node id -> scripts written for it
        self.pytest_options = list(pytest_options)  # what a reproducing pytest command needs
        self.database = database
        self.stream = stream
        self.export = export
        self.counts: Counter = Counter()
        self.failing_again = 0
        self._index: dict[str, set[bytes]] | None = None
        self._stored: dict[str, tuple[bytes, list[bytes], dict[bytes, list[bytes]]]] = {}
        self._reported: set[str] = set()
        self._shared: dict[str, bytes] = {}  # node id -> the shared key its stored failures are read from
        self._too_large: dict[str, int] = {}  # node id -> entries skipped unread at its latest look-up

    @property
    def index(self) -> dict[str, set[bytes]]:
        if self._index is None:
            self._index = read_index(self.database.db)
        return self._index

    def _out(self, text: str = "") -> None:
        # Node ids, examples and errors come from the database (anyone who can write to it): plain text only.
        self.stream.write(plain(text) + "\n")
        self.stream.flush()

    def _lookup(self, item: pytest.Function, key: bytes):
        if self.blob is not None:  # the one example given, whatever any database holds
            entry = hc.entry_from_blob(self.blob)
            return ([entry] if entry is not None else []), {}
        db = self.database.db
        current = _sorted_entries(db.fetch(key))
        # What plain pytest would adopt from the key the test's pool variants shared (variant_keys).
        shared = shared_key(item)
        self._shared.pop(item.nodeid, None)
        if not current and shared is not None:
            current = _sorted_entries(fallback(db, key, shared))
            if current:
                self._shared[item.nodeid] = shared
        older = {}
        for old_key in sorted(self.index.get(item.nodeid, ())):
            if old_key != key and old_key != self._shared.get(item.nodeid):
                entries = _sorted_entries(db.fetch(old_key))
                if entries:
                    older[old_key] = entries
        # The entries the database left out for their size (MAX_ENTRY_BYTES), under every key read.
        self._too_large[item.nodeid] = sum(
            self.database.too_large(k) for k in {key, shared, *self.index.get(item.nodeid, ())} if k
        )
        return current, older

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        super().pytest_collection_modifyitems(session, config, items)
        if self.blob is not None and self.error is None and len(items) > 1:  # a blob is one example of one test
            self.error = (
                f"--blob replays one example of one property, but {len(items)} are selected: "
                "name the one its report names (PATH::TEST[ID])"
            )
            config.hook.pytest_deselected(items=list(items))
            items[:] = []
            self.selected = []

    def _say_too_large(self, nodeid: str) -> None:
        """One line for the entries of ``nodeid`` skipped unread, if any."""
        n = self._too_large.get(nodeid, 0)
        if n:
            self.counts["too large"] += n
            self._out(f"TOO LARGE       {too_large_note(nodeid, n)}")

    # -- what has nothing to replay is skipped before its rank pool starts ---------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item not in self.selected:
            return
        item = cast(pytest.Function, item)  # the selection keeps only @given test functions
        key = database_key(item)
        current, older = self._lookup(item, key)
        self._stored[item.nodeid] = (key, current, older)
        self._say_too_large(item.nodeid)
        if not current and not older:
            self.counts["nothing stored"] += 1
            self._reported.add(item.nodeid)
            self._out(f"NOTHING STORED  {item.nodeid}")
            pytest.skip("fuzzdist replay: no failure stored for this test")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "setup" or report.nodeid in self._reported:
            return
        if report.skipped or report.failed:
            self._reported.add(report.nodeid)
            if report.nodeid not in self._stored:  # skipped by another plugin before our look-up
                item = next((i for i in self.selected if i.nodeid == report.nodeid), None)
                if item is not None:
                    item = cast(pytest.Function, item)  # the selection keeps only @given test functions
                    key = database_key(item)
                    self._stored[item.nodeid] = (key, *self._lookup(item, key))
            _, current, older = self._stored.get(report.nodeid, (None, [], {}))
            n = len(current) + sum(len(v) for v in older.values())
            if n == 0:
                self.counts["nothing stored"] += 1
                self._out(f"NOTHING STORED  {report.nodeid}")
                return
            if report.skipped and isinstance(report.longrepr, tuple):
                why = str(report.longrepr[2]).removeprefix("Skipped: ")
            else:
                why = _first_line("\n".join(str(report.longreprtext).strip().splitlines()[-1:]))
            self.counts["not replayed"] += 1
            self._out(
                f"NOT REPLAYED    {report.nodeid}: {n} stored failure(s), but the test "
                f"{'was skipped' if report.skipped else 'could not be set up'}: {why}"
            )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.error is not None or self.collect_errors:
            return
        self._out(f"fuzzdist replay: {len(self.selected)} properties, database {self.database.describe()}")
        # Index entries for tests that no longer exist (renamed or removed) in the files selected.
        collected = {item.nodeid for item in session.items}
        files = {Path(item.path).resolve() for item in session.items}
        rootdir = Path(session.config.rootpath)
        for nodeid, keys in sorted(self.index.items()):
            if nodeid in collected or (rootdir / nodeid.split("::", 1)[0]).resolve() not in files:
                continue
            n = sum(len(list(self.database.db.fetch(k))) for k in keys)
            if n:
                self.counts["orphaned"] += 1
                self._out(
                    f"GONE            {one_line(nodeid)}: {n} stored failure(s) of a test that no longer exists "
                    "(renamed or removed); nothing to replay them against"
                )

    # -- the replay of one property -------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function):
        if pyfuncitem.nodeid not in self._stored:
            return None
        item = pyfuncitem
        self._reported.add(item.nodeid)
        key = hc.function_digest(item.obj.hypothesis.inner_test)  # the key Hypothesis really uses now
        guessed, current, older = self._stored[item.nodeid]
        if key != guessed:
            current, older = self._lookup(item, key)
            self._say_too_large(item.nodeid)
        testargs = call_arguments(item)
        failing = []
        if item.nodeid in self._shared:
            self.counts["shared key"] += 1
            self._out(
                f"SHARED KEY      {item.nodeid}: its own database key holds nothing; replaying the "
                f"{len(current)} failure(s) stored under the key its pool variants shared before each "
                f"had its own ({self._shared[item.nodeid].hex()})"
            )
        for i, entry in enumerate(current, 1):
            outcome = self._replay_one(item, testargs, entry)
            what = "the example given with --blob" if self.blob is not None else f"stored failure {i} of {len(current)}"
            self._show(item, outcome, what)
            if outcome.status == "fails":
                failing.append(outcome)
        if older:
            n = sum(len(v) for v in older.values())
            self.counts["older version"] += 1
            self._out(
                f"OLDER VERSION   {item.nodeid}: {n} stored failure(s) under an older version of the "
                "test (its source changed since); replayed against the current version:"
            )
            for entries in older.values():
                for entry in entries:
                    outcome = self._replay_one(item, testargs, entry)
                    self._show(item, outcome, "stored under an older version of the test", older=True)
                    if outcome.status == "fails":
                        failing.append(outcome)
        if failing:
            self.failing_again += len(failing)
            pytest.fail(f"{len(failing)} stored failure(s) still fail", pytrace=False)
        return True

    def _replay_one(self, item: pytest.Function, testargs: dict, entry: bytes) -> _Outcome:
        from hypothesis.errors import DidNotReproduce

        blob = hc.reproduce_failure_blob(entry)
        if blob is None:
            return _Outcome(
                "unreadable",
                reason="the stored bytes are not a Hypothesis choice sequence (written by another Hypothesis version?)",
            )
        lines: list[str] = []
        recording = Recording()
        if self.export_dir is not None:  # note each pool.run, for the script
            testargs = wrap_pools(testargs, recording)
        with hc.reproducing(item.obj, blob) as decorator, known_bugs.collecting() as tally:
            try:
                with hc.reports_to(lines.append):
                    item.obj(**testargs)
            except DidNotReproduce as exc:
                if "completed successfully" in str(exc):
                    if tally:
                        return _Outcome("known", lines=lines, decorator=decorator, reason="\n".join(tally.lines()))
                    return _Outcome("passes", lines=lines, decorator=decorator)
                return _Outcome("doesn't fit", lines=lines, decorator=decorator, reason=_first_line(str(exc)))
            except KeyboardInterrupt:
                raise
            except OutcomeException as exc:
                if not isinstance(exc, Failed):
                    raise
                return _Outcome("fails", lines=lines, exc=exc, decorator=decorator, recording=recording)
            except BaseException as exc:  # noqa: BLE001 - a replay reports whatever the example raised
                return _Outcome("fails", lines=lines, exc=exc, decorator=decorator, recording=recording)
        if tally:
            return _Outcome("known", lines=lines, decorator=decorator, reason="\n".join(tally.lines()))
        return _Outcome("passes", lines=lines, decorator=decorator)

    def _show(self, item: pytest.Function, outcome: _Outcome, what: str, older: bool = False) -> None:
        self.counts[outcome.status] += 1
        example = outcome.example()
        if outcome.status == "passes":
            self._out(f"NO LONGER FAILS {item.nodeid} ({what}): it passes now")
            if example:
                self._out(_indent(example, 4))
            return
        if outcome.status == "known":
            self._out(f"KNOWN           {item.nodeid} ({what}): it fails only with known torch bugs")
            if example:
                self._out(_indent(example, 4))
            self._out(_indent(outcome.reason, 4))
            return
        if outcome.status in ("doesn't fit", "unreadable"):
            self._out(f"DOESN'T FIT     {item.nodeid} ({what}): {outcome.reason}")
            return
        exc = outcome.exc
        assert exc is not None  # a stored example that fails carries its exception
        self._out(f"FAILS           {item.nodeid} ({what})")
        self._out("  minimal example:")
        self._out(_indent(example or "(Hypothesis printed no example)", 6))
        self._out(f"  error: {type(exc).__name__}")
        self._out(_indent(_describe_error(exc), 6))
        if older:
            self._out(
                f"  reproduce: it is stored under the older test's database key, which pytest no longer "
                f"reads: add {outcome.decorator} to the test and run pytest "
                f"{shlex.quote(item.nodeid)}, or `fuzzdist run` it to store it under the current key"
            )
        elif self.blob is not None:
            self._out(f"  reproduce: {replay_command(item.nodeid, self.blob, self.pytest_options)}")
        else:
            self._out(f"  reproduce: {reproduce_command(item.nodeid, self.database, self.pytest_options)}")
        if self.export:
            self._out("  pin it as a regression test:")
            self._out(_indent(export_lines(item, outcome), 6))
        if self.export_dir is not None:
            self._out(f"  script: {self._export_script(item, outcome, what)}")
        self._out()

    def _export_script(self, item: pytest.Function, outcome: _Outcome, what: str) -> str:
        """Write ``outcome``'s standalone script; its path, or why there is none."""
        import torch

        assert self.export_dir is not None and outcome.exc is not None
        failed, why = failure_of(outcome.recording, outcome.exc)
        if failed is None:
            self.counts["not exported"] += 1
            return f"not exported: {why}"
        self._exported[item.nodeid] += 1
        stem = script_stem(item.nodeid, self._exported[item.nodeid])
        text = render(
            item.nodeid,
            what,
            outcome.example(),
            outcome.recording,
            failed,
            torch_version=torch.__version__,
            script_name=f"{stem}.py",
        )
        try:
            path = self.export_dir.write(stem, text)
        except OSError as exc:
            self.counts["not exported"] += 1
            return f"not exported: can't write it to {self.export_dir.spec} ({exc.strerror or exc})"
        self.counts["exported"] += 1
        return f"{path} (exits 1 while it fails, 0 once fixed)"

    def print_summary(self) -> None:
        order = [
            "fails",
            "exported",
            "not exported",
            "known",
            "passes",
            "doesn't fit",
            "unreadable",
            "too large",
            "shared key",
            "older version",
            "orphaned",
            "not replayed",
            "nothing stored",
        ]
        words = {
            "fails": "still fail",
            "exported": "exported as scripts",
            "not exported": "not exported (see each)",
            "known": "fail only with known torch bugs",
            "passes": "no longer fail",
            "doesn't fit": "no longer fit the test",
            "unreadable": "unreadable",
            "too large": "too large to read (skipped)",
            "shared key": "properties replayed from the key their pool variants shared",
            "older version": "properties with failures stored under an older version of the test",
            "orphaned": "stored for tests that no longer exist",
            "not replayed": "properties not replayed (skipped)",
            "nothing stored": "properties with nothing stored",
        }
        parts = [f"{self.counts[k]} {words[k]}" for k in order if self.counts[k]]
        self._out("replay: " + (", ".join(parts) if parts else "nothing to replay"))


class _Outcome:
    def __init__(
        self,
        status: str,
        *,
        lines=(),
        exc: BaseException | None = None,
        decorator: str = "",
        reason: str = "",
        recording: Recording | None = None,
    ) -> None:
        self.status, self.lines, self.exc, self.decorator, self.reason = status, list(lines), exc, decorator, reason
        self.recording = recording or Recording()  # the example's pool.run calls (--export-script)

    def example(self) -> str:
        """The example as Hypothesis reported it while replaying it ("" if it printed none)."""
        return hc.printed_example(self.lines, attempts=True)

    def call(self) -> str:
        """The example's call alone, without its draws and notes."""
        return hc.printed_call(self.lines, attempts=True)


def _describe_error(exc: BaseException) -> str:
    """A RankError's message holds every failing rank's traceback; otherwise the driver's traceback."""
    from fuzzdist.errors import RankFailure

    if isinstance(exc, RankFailure):
        return str(exc).rstrip()
    chunks = traceback.format_exception(exc)
    kept = [
        c for c in chunks if not (c.startswith('  File "') and any(h in c.split("\n", 1)[0] for h in _HIDDEN_FRAMES))
    ]
    return "".join(kept).rstrip()


def export_lines(item: pytest.Function, outcome: _Outcome) -> str:
    """``@example(...)`` for the failing example, or why it can't be pinned that way."""
    given = hc.given_argument_names(item.obj)
    call_text = outcome.call()
    values = split_call(call_text) or {}
    data_args = [name for name in given if values.get(name) == "data(...)"]
    missing = [name for name in given if name not in values]
    not_source = [name for name in given if name in values and name not in data_args and not _is_python(values[name])]
    line = "@example(" + ", ".join(f"{name}={values[name]}" for name in given if name in values) + ")"
    if not values or not_source:
        what = f"the repr of {', '.join(not_source)} is" if not_source else "Hypothesis's repr of the example is"
        return (
            f"# can't be pinned with @example: {what} not Python source.\n"
            f"# pin the exact example with {outcome.decorator} instead (tied to this Hypothesis version)"
        )
    if data_args or missing:
        draws = [ln for ln in outcome.example().splitlines() if ln.startswith("Draw ")]
        why = (
            f"`{', '.join(data_args)}` is drawn with st.data() ({'; '.join(draws) or 'no draws shown'}), "
            if data_args
            else f"no value is shown for {', '.join(missing)}, "
        )
        return (
            f"# {line}\n# can't be pinned with @example: {why}and @example needs a value for every "
            f"argument of @given. Pin it with\n{outcome.decorator}\n# (tied to this Hypothesis version), "
            "or draw those values in @given instead of with st.data()."
        )
    return line


def split_call(text: str) -> dict[str, str] | None:
    """``f(a=1, b=[2, 3])`` -> {"a": "1", "b": "[2, 3]"}: the keyword arguments of Hypothesis's
    repr of a call, split at top-level commas (values need not be valid Python)."""
    text = text.strip()
    start = text.find("(")
    if start < 0 or not text.endswith(")"):
        return None
    body = text[start + 1 : -1]
    parts, current, depth, quote, i = [], [], 0, None, 0
    while i < len(body):
        ch = body[i]
        current.append(ch)
        if quote:
            if ch == "\\" and i + 1 < len(body):
                current.append(body[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch == "#":  # a comment Hypothesis added, e.g. "# or any other generated value"
            current.pop()
            while i + 1 < len(body) and body[i + 1] != "\n":
                i += 1
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            current.pop()
            parts.append("".join(current))
            current = []
        i += 1
    parts.append("".join(current))
    values = {}
    for part in parts:
        name, eq, value = part.strip().partition("=")
        if not part.strip():
            continue
        if not eq or not name.strip().isidentifier():
            return None
        values[name.strip()] = value.strip()
    return values


def _is_python(source: str) -> bool:
    try:
        ast.parse(source, mode="eval")
        return True
    except SyntaxError:
        return False


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line if line else line for line in text.splitlines())


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
