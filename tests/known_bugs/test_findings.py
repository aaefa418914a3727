"""The standalone reproducers in docs/findings/ still show their torch bug on the installed torch.

Each ``docs/findings/<id>.py`` runs with torch alone and exits 1 ("BUG: ...") while the bug
reproduces, 0 ("FIXED: ...") once torch behaves: a reproducer that exits 0 means torch fixed the
bug, and docs/findings.md and the known-bug entry must say so.  One that exits 3 ("NO VERDICT: ...")
could not tell: a wait that is not part of the bug (its ranks' start-up) ran out, a slow machine rather
than a changed torch, and the failure says so.  The scripts run in parallel (most
of their time is importing torch in each rank process, or waiting out a bounded hang), each in its
own process group so a timeout kills its ranks too.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
FINDINGS_DIR = ROOT / "docs" / "findings"
FINDINGS_MD = ROOT / "docs" / "findings.md"
SCRIPTS = sorted(p for p in FINDINGS_DIR.glob("*.py") if p.name != "run_matrix.py")  # the matrix runs them
IDS = [p.stem for p in SCRIPTS]

SCRIPT_TIMEOUT_S = 900  # each takes seconds; a script bounds its ranks' start-up itself (NO VERDICT, exit 3)
NO_VERDICT_EXIT = 3
PARALLEL = 4  # rank processes import torch (CPU-bound); the hang reproducers mostly wait


class Run(NamedTuple):
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)  # DETAIL's fingerprint check turns the size mismatches into errors
    if "GLOO_SOCKET_IFNAME" not in env:  # keep gloo on loopback, as fuzzdist's pool does
        names = [name for _, name in socket.if_nameindex()]
        loopback = next((n for n in ("lo", "lo0") if n in names), None)
        if loopback:
            env["GLOO_SOCKET_IFNAME"] = loopback
    return env


KILLED_READ_S = 10.0  # after the kill, the rest of the output is read for this long at most


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the script and any rank process it left behind
    except ProcessLookupError:
        pass


def _run(script: Path) -> Run:
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=SCRIPT_TIMEOUT_S)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:  # bounded too: a process that left the group may still hold the pipes
            out, err = proc.communicate(timeout=KILLED_READ_S)
        except subprocess.TimeoutExpired as again:
            cut = f"\n(output cut: its pipes were still open {KILLED_READ_S:g}s after the kill)"
            out, err = _text(again.stdout), _text(again.stderr) + cut
            proc.kill()
            proc.wait(KILLED_READ_S)
        code = None
    _kill_group(proc)
    return Run(code, out, err)


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest) -> dict[str, Run]:
    """Every selected reproducer's run, all started at once (PARALLEL at a time)."""
    wanted = sorted({item.callspec.params["finding"] for item in request.session.items
                     if getattr(item, "originalname", None) == "test_reproducer_still_shows_the_bug"
                     and hasattr(item, "callspec")})
    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(zip(wanted, pool.map(_run, [FINDINGS_DIR / f"{i}.py" for i in wanted]), strict=True))


def matrix_verdicts(version: str) -> dict[str, str]:
    """What docs/findings.md's "Torch versions" matrix says each reproducer prints on torch ``version``
    (its column "torch <version>"): finding -> "BUG", "FIXED", ...; {} where the matrix has no such column."""
    text = FINDINGS_MD.read_text(encoding="utf-8")
    section = text[text.index("\n## Torch versions\n"):]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    if f"torch {version}" not in header:
        return {}
    column = header.index(f"torch {version}")
    verdicts = {}
    for row in rows[1:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if len(cells) == len(header) and cells[0].startswith("`"):
            verdicts[cells[0].strip("`")] = cells[column]
    return verdicts


@pytest.mark.parametrize("finding", IDS)
def test_reproducer_still_shows_the_bug(runs: dict[str, Run], finding: str) -> None:
    """Exit 1 with a "BUG: ..." line: the bug is still in the installed torch; or, where docs/findings.md's
    matrix says this torch fixed it (or never had it), exit 0 with a "FIXED: ..." line."""
    run = runs[finding]
    lines = run.stdout.strip().splitlines()
    verdict = lines[-1] if lines else ""
    shown = f"stdout:\n{run.stdout}\nstderr (last 3000 chars):\n{run.stderr[-3000:]}"
    fixed_here = matrix_verdicts(torch.__version__).get(finding) == "FIXED"
    if run.returncode == 0 and verdict.startswith("FIXED:"):
        if fixed_here:
            return
        pytest.fail(f"torch {torch.__version__} fixed {finding}: update docs/findings.md and the known-bug entry\n"
                    f"{verdict}", pytrace=False)
    if fixed_here and run.returncode == 1 and verdict.startswith("BUG:"):
        pytest.fail(f"torch {torch.__version__} shows {finding}, which docs/findings.md's matrix says it fixed: "
                    f"update the matrix and the known-bug entry\n{verdict}", pytrace=False)
    if run.returncode is None:
        pytest.fail(f"docs/findings/{finding}.py ran past {SCRIPT_TIMEOUT_S}s (killed): its own bounds failed, "
                    f"or the machine is far too slow\n{shown}", pytrace=False)
    if run.returncode == NO_VERDICT_EXIT and verdict.startswith("NO VERDICT:"):
        pytest.fail(f"a slow machine, not a changed torch: docs/findings/{finding}.py reached no verdict on torch "
                    f"{torch.__version__}: {verdict}\nRun it again on a quieter machine.", pytrace=False)
    if run.returncode != 1 or not verdict.startswith("BUG:"):
        pytest.fail(f"docs/findings/{finding}.py failed (exit {run.returncode}), neither BUG nor FIXED\n{shown}",
                    pytrace=False)


def test_findings_md_lists_every_reproducer_and_only_those() -> None:
    listed = set(re.findall(r"docs/findings/([a-z0-9-]+)\.py", FINDINGS_MD.read_text(encoding="utf-8")))
    assert listed - set(IDS) == set(), "docs/findings.md names reproducers that don't exist"
    assert set(IDS) - listed == set(), "reproducers in docs/findings/ that docs/findings.md doesn't describe"


@pytest.mark.parametrize("finding", IDS)
def test_reproducer_needs_torch_alone(finding: str) -> None:
    """A reproducer is pasted into upstream reports: it imports the standard library and torch only."""
    tree = ast.parse((FINDINGS_DIR / f"{finding}.py").read_text(encoding="utf-8"))
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    foreign = {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names | {"torch"}}
    assert not foreign, f"docs/findings/{finding}.py imports {sorted(foreign)}: use torch and the standard library"


# Findings no property draws on purpose (mismatched sizes across ranks are the user's error; the
# findings are about how gloo fails on them), so they have no registry entry.
NO_ENTRY = {"gloo-all-reduce-size-mismatch-hangs", "gloo-broadcast-size-mismatch-silent"}


def test_registry_and_findings_name_each_other() -> None:
    """Every known-bug entry names a reproducer that exists and is described here; every finding with a
    reproducer has an entry (its id, or the id of the script it names), unless it is in NO_ENTRY."""
    from fuzzdist import known_bugs

    # fuzzdist's own entries: a test file may register planted ones (tests/known_bugs/test_known_bugs.py)
    # in this process
    entries = [bug for bug in known_bugs.registry().values()
               if getattr(bug.recognise, "__module__", "").startswith("fuzzdist.")]
    assert entries
    listed = set(re.findall(r"docs/findings/([a-z0-9-]+)\.py", FINDINGS_MD.read_text(encoding="utf-8")))
    named = set()
    for bug in entries:
        assert bug.reproducer is not None, f"known bug {bug.id!r} names no reproducer: write docs/findings/<id>.py"
        stem = Path(bug.reproducer).stem
        assert (ROOT / bug.reproducer).is_file(), f"known bug {bug.id!r} names {bug.reproducer}, which doesn't exist"
        assert stem in listed, f"known bug {bug.id!r}'s reproducer {bug.reproducer} is not in docs/findings.md"
        named.add(stem)
    assert set(IDS) - named - NO_ENTRY == set(), "findings with a reproducer but no KnownBug entry"


def _table_rows() -> dict[str, list[str]]:
    """docs/findings.md's table rows, by id: the cells after the id."""
    rows = {}
    for line in FINDINGS_MD.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| \[`([a-z0-9-]+)`\]\(#[a-z0-9-]+\) \|(.*)\|$", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split(" | ")]
    return rows


def test_every_finding_has_a_class_documentation_upstream_and_versions() -> None:
    """Each finding has one row, whose class is one of the known kinds, and a section with its class, the
    documentation it contradicts, its relation to upstream and the versions it was run on."""
    from fuzzdist.known_bugs import KINDS

    text = FINDINGS_MD.read_text(encoding="utf-8")
    rows = _table_rows()
    assert set(rows) == set(IDS), "docs/findings.md's tables and docs/findings/ name different findings"
    for finding, cells in rows.items():
        assert cells[0] in KINDS, f"{finding}: class {cells[0]!r} is none of {KINDS}"
        assert len(cells) >= 5 and all(cells), f"{finding}: its row lacks a cell"
        section = re.search(rf"(?ms)^#+ {re.escape(finding)}\n(.*?)(?=^#+ |\Z)", text)
        assert section, f"docs/findings.md has no section for {finding}"
        body = section.group(1)
        for part in (f"**Class:** {cells[0]}.", "**Documentation it contradicts.**", "**Upstream relation.**",
                     "**Reproduces on.**"):
            assert part in body, f"{finding}'s section lacks {part!r}"
        assert "<<" not in body, f"{finding}'s section has a placeholder left"


def test_misuse_is_listed_apart_and_not_counted_as_a_bug() -> None:
    """A finding of class "missing validation" sits under its own heading, after every bug."""
    text = FINDINGS_MD.read_text(encoding="utf-8")
    misuse = {f for f, cells in _table_rows().items() if cells[0] == "missing validation"}
    assert misuse, "no finding is classed missing validation"
    heading = text.index("## Missing validation: misuse that torch accepts")
    for finding in misuse:
        assert text.index(f"### {finding}\n") > heading, f"{finding} is misuse: list it under 'Missing validation'"
    for finding in set(IDS) - misuse:
        assert text.index(f"## {finding}\n") < heading, f"{finding} is a bug: list it before 'Missing validation'"


def test_each_known_bug_entry_has_the_class_its_finding_has() -> None:
    from fuzzdist import known_bugs

    rows = _table_rows()
    entries = [bug for bug in known_bugs.registry().values()
               if getattr(bug.recognise, "__module__", "").startswith("fuzzdist.")]
    for bug in entries:
        assert bug.reproducer is not None
        stem = Path(bug.reproducer).stem
        assert bug.kind == rows[stem][0], (f"known bug {bug.id!r} has kind {bug.kind!r}, docs/findings.md classes "
                                           f"{stem} as {rows[stem][0]!r}")


def _verdict_failure(run: Run, finding: str = "x") -> str | None:
    """What test_reproducer_still_shows_the_bug says about ``run`` of ``finding`` (None: it passes)."""
    try:
        test_reproducer_still_shows_the_bug({finding: run}, finding)
    except pytest.fail.Exception as exc:
        return str(exc)
    return None


def test_the_matrix_says_what_each_torch_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reproducer whose bug the installed torch fixed, by docs/findings.md's matrix, passes with FIXED
    (a bug found on an older torch, or one a newer torch fixed) and fails with BUG."""
    verdicts = matrix_verdicts("2.6.0+cu124")
    assert set(verdicts) == set(IDS) and set(verdicts.values()) <= {"BUG", "FIXED"}
    assert matrix_verdicts("2.13.0+cpu")["gloo-reduce-scatter-tensor-ignores-op"] == "FIXED"
    assert matrix_verdicts("0.1.0") == {}
    monkeypatch.setattr(torch, "__version__", "2.14.1+cu130")
    fixed = "new-group-local-sync-recreate-fails"
    assert _verdict_failure(Run(0, "FIXED: gone\n", ""), fixed) is None
    assert "which docs/findings.md's matrix says it fixed" in (_verdict_failure(Run(1, "BUG: back\n", ""), fixed) or "")
    assert "fixed gloo-bool-sum-stores-2" in (_verdict_failure(Run(0, "FIXED: gone\n", ""), "gloo-bool-sum-stores-2")
                                              or "")


def test_the_verdicts_are_told_apart() -> None:
    """BUG passes; FIXED is a changed torch; NO VERDICT is a slow machine; anything else is a broken script."""
    assert _verdict_failure(Run(1, "BUG: still there\n", "")) is None
    assert "fixed x" in (_verdict_failure(Run(0, "FIXED: gone\n", "")) or "")
    slow = _verdict_failure(Run(3, "NO VERDICT: the ranks did not answer within 300 s\n", "")) or ""
    assert "a slow machine, not a changed torch" in slow and "fixed" not in slow
    broken = _verdict_failure(Run(2, "", "Traceback ...")) or ""
    assert "neither BUG nor FIXED" in broken
    assert "killed" in (_verdict_failure(Run(None, "", "")) or "")
