"""Run every reproducer in docs/findings/ on several torch installs and print the finding x version table.

    python docs/findings/run_matrix.py VENV [VENV ...] [--only ID ...] [--timeout S] [--jobs N] [--check | --update]

Each VENV is a virtual environment (a folder with bin/python) or a Python executable, with the torch
to check installed.  Every reproducer runs once on each, and the table (Markdown, one row per finding,
one column per torch version) says what it printed:

- ``BUG``: exit 1 with a ``BUG:`` line, the bug reproduces;
- ``FIXED``: exit 0 with a ``FIXED:`` line, torch behaves;
- ``no verdict``: exit 3 with a ``NO VERDICT:`` line (a wait that is not part of the bug ran out: a
  slow or busy machine), or the run passed ``--timeout`` and was killed;
- ``error``: anything else (the script failed on that torch, e.g. an API it uses doesn't exist there);
  the first words of its last output line follow.

The catalogue (``fuzzdist/known_bugs/catalogue.toml``) keeps the matrix the docs show.  ``--check``
compares what the reproducers printed with it and exits 1 naming each cell that differs (a torch
version it has no column for differs everywhere); ``--update`` writes the cells into it (a new torch
version becomes a new column), after which ``python -m fuzzdist.known_bugs.catalogue_pages --write``
regenerates the pages.

Bad input (a missing venv, one whose Python can't import torch, an unknown id) gets one line and exit 2
before anything runs.  Without ``--check``, the exit code is 0 once the table is printed, whatever it
shows.  It needs only the standard library (``--check`` and ``--update``: Python 3.11's ``tomllib``, or
``tomli``); a reproducer's ranks run on gloo over loopback (``GLOO_SOCKET_IFNAME=lo``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CATALOGUE_MODULE = ROOT / "fuzzdist" / "known_bugs" / "catalogue.py"
NO_VERDICT_EXIT = 3  # what a reproducer exits with when it could not reach a verdict


class UsageError(Exception):
    """Bad input: reported as one line, exit 2."""


def reproducers() -> dict[str, Path]:
    """The reproducers, by id: every ``<id>/repro.py`` here."""
    return {p.parent.name: p for p in sorted(HERE.glob("*/repro.py"))}


def catalogue_module() -> ModuleType:
    """fuzzdist's catalogue module, loaded by path: standard library only, so no torch (nor fuzzdist's
    dependencies) is needed in the Python that runs this script."""
    spec = importlib.util.spec_from_file_location("fuzzdist_findings_catalogue", CATALOGUE_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def differences(catalogue, ids: list[str], versions: list[str], cells: dict[tuple[str, int], str]) -> list[str]:
    """Each cell that differs from the catalogue's matrix, as a line to print."""
    out = []
    for k, version in enumerate(versions):
        if version not in catalogue.versions:
            out.append(f"torch {version} is not a column of the catalogue's matrix (it has "
                       f"{', '.join(catalogue.versions)}): --update adds it")
            continue
        for i in ids:
            written = catalogue.findings[i].matrix[version] if i in catalogue.findings else "not in the catalogue"
            if cells[i, k] != written:
                out.append(f"{i} on torch {version}: printed {cells[i, k]}, the catalogue says {written}")
    return out


def python_of(venv: str) -> Path:
    """The Python executable of ``venv`` (a venv folder or an executable), checked to exist."""
    path = Path(venv)
    if path.is_dir():
        path = path / "bin" / "python"
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UsageError(f"{venv}: no Python there; name a virtual environment (a folder with bin/python) "
                         "or a Python executable that has torch installed")
    return path


def torch_version(python: Path, venv: str) -> str:
    """The torch version ``python`` imports (raises UsageError where it can't import torch)."""
    try:
        done = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True,
                              text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        raise UsageError(f"{venv}: importing torch took over 300 s; is the machine overloaded?") from exc
    if done.returncode != 0 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"{venv}: its Python can't import torch ({last[:160]}); install torch there first")
    return done.stdout.strip().splitlines()[-1]


def env() -> dict[str, str]:
    """The reproducers' environment: gloo on loopback, no DETAIL debug mode (it turns mismatches into errors)."""
    out = dict(os.environ)
    out.pop("TORCH_DISTRIBUTED_DEBUG", None)
    out.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return out


def verdict(returncode: int | None, stdout: str, stderr: str) -> str:
    """One table cell from a run's exit code and output (``None``: killed at the timeout)."""
    lines = stdout.strip().splitlines()
    last = lines[-1] if lines else ""
    if returncode is None:
        return "no verdict (killed at the timeout)"
    if returncode == 1 and last.startswith("BUG:"):
        return "BUG"
    if returncode == 0 and last.startswith("FIXED:"):
        return "FIXED"
    if returncode == NO_VERDICT_EXIT and last.startswith("NO VERDICT:"):
        return "no verdict"
    tail = (stderr.strip().splitlines() or lines or ["no output"])[-1]
    tail = " ".join(tail.split()).replace("|", "/")
    return f"error (exit {returncode}: {tail[:70]})"


def run_one(python: Path, script: Path, timeout: float) -> str:
    """Run one reproducer with one Python; its table cell."""
    proc = subprocess.Popen([str(python), str(script)], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        out, err, code = "", "", None
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the script and any rank it left behind
    except ProcessLookupError:
        pass
    if code is None:
        proc.wait(timeout=30)
    return verdict(code, out, err)


def table(ids: list[str], versions: list[str], cells: dict[tuple[str, int], str]) -> str:
    """The Markdown table: one row per finding, one column per torch version."""
    head = "| finding | " + " | ".join(f"torch {v}" for v in versions) + " |"
    rule = "|---|" + "---|" * len(versions)
    rows = [f"| `{i}` | " + " | ".join(cells[i, k] for k in range(len(versions))) + " |" for i in ids]
    return "\n".join([head, rule, *rows])


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        raise UsageError(f"{message} (see --help)")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("venvs", nargs="+", metavar="VENV", help="a virtual environment or Python with torch")
    parser.add_argument("--only", nargs="+", metavar="ID", default=None, help="run these findings only")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one reproducer may run (600)")
    parser.add_argument("--jobs", type=int, default=2, help="reproducers run at once (2)")
    against = parser.add_mutually_exclusive_group()
    against.add_argument("--check", action="store_true", help="exit 1 where a cell differs from the catalogue's")
    against.add_argument("--update", action="store_true", help="write the cells into the catalogue")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        known = reproducers()
        ids = args.only or list(known)
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise UsageError(f"no reproducer named {', '.join(unknown)}; the ids are the folder names in {HERE}")
        if not 0 < args.timeout <= 86400:
            raise UsageError(f"--timeout {args.timeout:g}: give the seconds one reproducer may run, 1 to 86400")
        if not 1 <= args.jobs <= 64:
            raise UsageError(f"--jobs {args.jobs}: give how many reproducers run at once, 1 to 64")
        pythons = [python_of(v) for v in args.venvs]
        versions = [torch_version(p, v) for p, v in zip(pythons, args.venvs, strict=True)]
        catalogue = catalogue_module() if args.check or args.update else None
    except UsageError as exc:
        print(f"run_matrix: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:  # Python 3.10 without tomli
        print(f"run_matrix: --check and --update read the catalogue with tomllib ({exc}); run this script with "
              "Python 3.11 or later, or pip install tomli", file=sys.stderr)
        return 2
    jobs = [(i, k) for k in range(len(pythons)) for i in ids]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = pool.map(lambda job: run_one(pythons[job[1]], known[job[0]], args.timeout), jobs)
        cells = dict(zip(jobs, results, strict=True))
    print(table(ids, versions, cells))
    if args.update:
        assert catalogue is not None
        written = catalogue.load()
        missing = [i for i in ids if i not in written.findings]
        if missing:
            print(f"run_matrix: {', '.join(missing)} not in the catalogue ({catalogue.PATH}): add their entries "
                  "first", file=sys.stderr)
            return 1
        new = catalogue.with_matrix(written, {(i, versions[k]): cell for (i, k), cell in cells.items()})
        catalogue.PATH.write_text(catalogue.dump(new), encoding="utf-8")
        print(f"wrote the cells into {catalogue.PATH}; now run python -m fuzzdist.known_bugs.catalogue_pages --write")
    if args.check:
        assert catalogue is not None
        differ = differences(catalogue.load(), ids, versions, cells)
        for line in differ:
            print(f"differs: {line}", file=sys.stderr)
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
