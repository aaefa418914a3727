"""The standalone reproducers in docs/findings/ still show their torch bug on the installed torch.

Each ``docs/findings/<id>/repro.py`` runs with torch alone and exits 1 ("BUG: ...") while the bug
reproduces, 0 ("FIXED: ...") once torch behaves: a reproducer that exits 0 means torch fixed the
bug, and the catalogue's matrix (``fuzzdist/known_bugs/catalogue.toml``) must say so.  One that exits 3
("NO VERDICT: ...") could not tell: a wait that is not part of the bug (its ranks' start-up) ran out, a
slow machine rather than a changed torch, and the failure says so.  The scripts run in parallel (most
of their time is importing torch in each rank process, or waiting out a bounded hang), each in its
own process group so a timeout kills its ranks too.
"""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from fuzzdist.known_bugs import catalogue

ROOT = Path(__file__).resolve().parents[2]
FINDINGS_DIR = ROOT / "docs" / "findings"
SCRIPTS = sorted(FINDINGS_DIR.glob("*/repro.py"))
IDS = [p.parent.name for p in SCRIPTS]

CATALOGUE = "fuzzdist/known_bugs/catalogue.toml"
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
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
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
    wanted = sorted(
        {
            item.callspec.params["finding"]
            for item in request.session.items
            if getattr(item, "originalname", None) == "test_reproducer_still_shows_the_bug"
            and hasattr(item, "callspec")
        }
    )
    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(zip(wanted, pool.map(_run, [FINDINGS_DIR / i / "repro.py" for i in wanted]), strict=True))


def matrix_verdicts(version: str) -> dict[str, str]:
    """What the catalogue's matrix says each reproducer prints on torch ``version`` (its column):
    finding -> "BUG", "FIXED", ...; {} where the matrix has no such column."""
    findings = catalogue.load().findings.values()
    return {f.id: f.matrix[version] for f in findings if version in f.matrix}


@pytest.mark.parametrize("finding", IDS)
def test_reproducer_still_shows_the_bug(runs: dict[str, Run], finding: str) -> None:
    """Exit 1 with a "BUG: ..." line: the bug is still in the installed torch; or, where the catalogue's
    matrix says this torch fixed it (or never had it), exit 0 with a "FIXED: ..." line."""
    run = runs[finding]
    lines = run.stdout.strip().splitlines()
    verdict = lines[-1] if lines else ""
    shown = f"stdout:\n{run.stdout}\nstderr (last 3000 chars):\n{run.stderr[-3000:]}"
    fixed_here = matrix_verdicts(torch.__version__).get(finding) == "FIXED"
    if run.returncode == 0 and verdict.startswith("FIXED:"):
        if fixed_here:
            return
        pytest.fail(
            f"torch {torch.__version__} fixed {finding}: update its matrix in {CATALOGUE}\n{verdict}", pytrace=False
        )
    if fixed_here and run.returncode == 1 and verdict.startswith("BUG:"):
        pytest.fail(
            f"torch {torch.__version__} shows {finding}, which the catalogue's matrix says it fixed: "
            f"update its matrix in {CATALOGUE}\n{verdict}",
            pytrace=False,
        )
    if run.returncode is None:
        pytest.fail(
            f"docs/findings/{finding}/repro.py ran past {SCRIPT_TIMEOUT_S}s (killed): its own bounds failed, "
            f"or the machine is far too slow\n{shown}",
            pytrace=False,
        )
    if run.returncode == NO_VERDICT_EXIT and verdict.startswith("NO VERDICT:"):
        pytest.fail(
            f"a slow machine, not a changed torch: docs/findings/{finding}/repro.py reached no verdict on "
            f"torch {torch.__version__}: {verdict}\nRun it again on a quieter machine.",
            pytrace=False,
        )
    if run.returncode != 1 or not verdict.startswith("BUG:"):
        pytest.fail(
            f"docs/findings/{finding}/repro.py failed (exit {run.returncode}), neither BUG nor FIXED\n{shown}",
            pytrace=False,
        )


def test_each_finding_has_one_home_and_a_catalogue_entry() -> None:
    """docs/findings/<id>/ holds the write-up and the reproducer of each finding in the catalogue, and of
    nothing else."""
    homes = {p.name for p in FINDINGS_DIR.iterdir() if p.is_dir()}
    assert homes == set(catalogue.load().findings), "docs/findings/ and the catalogue name different findings"
    for finding in homes:
        assert (FINDINGS_DIR / finding / "repro.py").is_file(), f"docs/findings/{finding}/ has no repro.py"
        assert (FINDINGS_DIR / finding / "README.md").is_file(), f"docs/findings/{finding}/ has no README.md"


@pytest.mark.parametrize("finding", IDS)
def test_each_write_up_quotes_its_documentation_and_upstream(finding: str) -> None:
    """A write-up says what is wrong, quotes the documentation it contradicts and says how it relates to
    upstream; its class and versions are the generated part's, not repeated by hand."""
    text = (FINDINGS_DIR / finding / "README.md").read_text(encoding="utf-8")
    write_up = text.split("<!-- End of the generated part. -->", 1)[-1]
    for part in ("**What is wrong", "**Documentation it contradicts.**", "**Upstream relation.**"):
        assert part in write_up, f"docs/findings/{finding}/README.md lacks {part!r}"
    for repeated in ("**Class:**", "**Reproduces on.**"):
        assert repeated not in write_up, f"docs/findings/{finding}/README.md repeats {repeated!r}: the catalogue has it"
    assert "<<" not in write_up, f"docs/findings/{finding}/README.md has a placeholder left"


@pytest.mark.parametrize("finding", IDS)
def test_reproducer_needs_torch_alone(finding: str) -> None:
    """A reproducer is pasted into upstream reports: it imports the standard library and torch only."""
    tree = ast.parse((FINDINGS_DIR / finding / "repro.py").read_text(encoding="utf-8"))
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    foreign = {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names | {"torch"}}
    assert not foreign, (
        f"docs/findings/{finding}/repro.py imports {sorted(foreign)}: use torch and the standard library"
    )


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """The calls in ``tree`` of a function or method named ``name`` (``f(...)`` or ``x.f(...)``)."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and name in (getattr(node.func, "attr", None), getattr(node.func, "id", None))
    ]


def _starts_ranks(tree: ast.AST) -> bool:
    """Whether a reproducer starts processes of its own (its ranks)."""
    return any(_calls(tree, name) for name in ("Process", "start_processes", "spawn"))


RANK_SCRIPTS = [p.parent.name for p in SCRIPTS if _starts_ranks(ast.parse(p.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("finding", RANK_SCRIPTS)
def test_reproducer_bounds_every_wait_on_its_ranks(finding: str) -> None:
    """A reproducer that starts ranks reaches a verdict in bounded time (docs/findings/adding.md's skeleton):
    each rank's process group has a timeout, no launcher joins the ranks without a bound (torch.multiprocessing's
    ``start_processes`` and ``spawn`` do unless ``join=False``), and its ``__main__`` guard turns a wait that
    ran out (``queue.Empty``) into NO VERDICT."""
    tree = ast.parse((FINDINGS_DIR / finding / "repro.py").read_text(encoding="utf-8"))
    script = f"docs/findings/{finding}/repro.py"
    for call in _calls(tree, "init_process_group"):
        has_timeout = any(k.arg == "timeout" for k in call.keywords)
        assert has_timeout, f"{script}:{call.lineno}: init_process_group has no timeout="
    for name in ("start_processes", "spawn"):
        for call in _calls(tree, name):
            joins = not any(
                k.arg == "join" and isinstance(k.value, ast.Constant) and k.value.value is False for k in call.keywords
            )
            assert not joins, f"{script}:{call.lineno}: {name}() joins the ranks with no bound; pass join=False"
    guards = [n for n in tree.body if isinstance(n, ast.If) and "__name__" in ast.unparse(n.test)]
    caught = {ast.unparse(h.type) for g in guards for h in ast.walk(g) if isinstance(h, ast.ExceptHandler) and h.type}
    assert "queue.Empty" in caught, f"{script}: its __main__ guard doesn't turn queue.Empty into NO VERDICT"


def test_misuse_is_listed_apart_and_not_counted_as_a_bug() -> None:
    """A finding of class "missing validation" sits under its own heading, after every bug."""
    text = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    findings = catalogue.load().findings.values()
    misuse = {f.id for f in findings if f.is_misuse}
    assert misuse, "no finding is classed missing validation"
    heading = text.index("### Missing validation")
    for finding in findings:
        row = text.index(f"| [`{finding.id}`](findings/{finding.id}/README.md) |")
        assert (row > heading) == finding.is_misuse, f"{finding.id} is listed under the wrong heading"


def _verdict_failure(run: Run, finding: str = "x") -> str | None:
    """What test_reproducer_still_shows_the_bug says about ``run`` of ``finding`` (None: it passes)."""
    try:
        test_reproducer_still_shows_the_bug({finding: run}, finding)
    except pytest.fail.Exception as exc:
        return str(exc)
    return None


def test_the_matrix_says_what_each_torch_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reproducer whose bug the installed torch fixed, by the catalogue's matrix, passes with FIXED
    (a bug found on an older torch, or one a newer torch fixed) and fails with BUG."""
    verdicts = matrix_verdicts("2.6.0+cu124")
    # "not run" is the catalogue's cell for a torch a finding's reproducer was never run on.
    assert set(verdicts) == set(IDS) and set(verdicts.values()) <= {"BUG", "FIXED", "not run"}
    assert "BUG" in verdicts.values() and "FIXED" in verdicts.values()
    assert matrix_verdicts("2.13.0+cpu")["gloo-reduce-scatter-tensor-ignores-op"] == "FIXED"
    assert matrix_verdicts("0.1.0") == {}
    monkeypatch.setattr(torch, "__version__", "2.14.1+cu130")
    fixed = "new-group-local-sync-recreate-fails"
    assert _verdict_failure(Run(0, "FIXED: gone\n", ""), fixed) is None
    assert "which the catalogue's matrix says it fixed" in (_verdict_failure(Run(1, "BUG: back\n", ""), fixed) or "")
    assert "fixed gloo-bool-sum-stores-2" in (
        _verdict_failure(Run(0, "FIXED: gone\n", ""), "gloo-bool-sum-stores-2") or ""
    )


def test_the_verdicts_are_told_apart() -> None:
    """BUG passes; FIXED is a changed torch; NO VERDICT is a slow machine; anything else is a broken script."""
    assert _verdict_failure(Run(1, "BUG: still there\n", "")) is None
    assert "fixed x" in (_verdict_failure(Run(0, "FIXED: gone\n", "")) or "")
    slow = _verdict_failure(Run(3, "NO VERDICT: the ranks did not answer within 300 s\n", "")) or ""
    assert "a slow machine, not a changed torch" in slow and "fixed" not in slow
    broken = _verdict_failure(Run(2, "", "Traceback ...")) or ""
    assert "neither BUG nor FIXED" in broken
    assert "killed" in (_verdict_failure(Run(None, "", "")) or "")
