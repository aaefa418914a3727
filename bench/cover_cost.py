"""What ``--cover`` costs per example: coverage on against off, in interleaved rounds, per mechanism.

Run (from the repository root):

    python bench/cover_cost.py ranks [--examples 60] [--rounds 3] [--json FILE]
    python bench/cover_cost.py mechanisms [--examples 300] [--rounds 5] [--pythons venv,3.10,3.11,3.12,3.13]
    python bench/cover_cost.py suite [--duration 60] [--rounds 2] [--modes off,ctracer,settrace] [TARGET ...]

``ranks``: the DDP parity property at 2 ranks (``test_ddp_gradients_match_local[cpu-w2-gloo]``), on this
interpreter (the one with torch), once per mode in each round (off, then each mechanism this Python
has, the order turned round every other round): one child process runs the test under the
``campaign`` profile with ``max_examples=N``, a fresh database and a fixed ``--hypothesis-seed`` (the
same examples in every mode), with ``--cover torch.distributed`` turned on in the modes that measure.
The figure is the test's call phase in seconds (the pool's start-up excluded); a mode's ratio is its
seconds over the same round's "off" seconds, and the reported ratio is the median of the rounds'.

``mechanisms``: the rank-side collector alone (``fuzzdist/pool/rank/line_cover.py``, loaded by path: no
torch needed), on each pyenv Python, on two pure-Python workloads per "example": *target*, parsing
e-mail messages with the measured package (``email``): every line run is a measured one; *other*,
Fraction arithmetic outside it: the cost of the hooks on code that isn't measured.  Each round
times N examples off and with each mechanism, interleaved; a new scope each round (its first
example sees every line as new).  ``venv`` in ``--pythons`` is this interpreter (the only one here
with coverage.py, whose C tracer the ``ctracer`` mechanism uses).

``suite``: whole campaigns, ``fuzzdist run --duration D --jobs 1`` over TARGETs (default: several
property files of different families), once per mode and round, the order turned round every
other round: "off", or ``--cover torch.distributed`` with ``FUZZDIST_COVER_MECHANISM`` set to the
mode.  The budget excludes imports and pool start-ups, so examples run in the budget are the
throughput: a mode's cost is the same round's off examples over its own (on / off time per example).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODE = "properties/test_ddp_parity.py::test_ddp_gradients_match_local[cpu-w2-gloo]"
SEED = 20261126


# -- ranks: the DDP parity property --------------------------------------------------------------


def _rank_child(mode: str, n: int, tmp: Path) -> int:
    import pytest
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    from fuzzdist.driver import profiles
    from fuzzdist.pool import line_coverage

    profiles.register()
    settings.register_profile(
        "cover-bench",
        settings(
            parent=settings.get_profile("campaign"),
            max_examples=n,
            database=DirectoryBasedExampleDatabase(str(tmp / "db")),
        ),
    )
    if mode != "off":
        line_coverage.enable(["torch.distributed"], mechanism=mode)
    row: dict = {}

    class Measure:
        def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
            if report.when == "call":
                row["seconds"], row["outcome"] = report.duration, report.outcome

        @pytest.hookimpl(trylast=True)
        def pytest_runtest_teardown(self, item: pytest.Item) -> None:
            counts = re.findall(r"(\d+) passing, (\d+) failing", getattr(item, "hypothesis_statistics", ""))
            row["examples"] = sum(int(p) + int(f) for p, f in counts)

    code = pytest.main(
        [
            NODE,
            "-q",
            "-p",
            "no:cacheprovider",
            "--hypothesis-profile=cover-bench",
            "-o",
            "timeout=0",
            f"--hypothesis-seed={SEED}",
        ],
        plugins=[Measure()],
    )
    row["code"] = int(code)
    row["lines"] = line_coverage.lines_reached()
    (tmp / "result.json").write_text(json.dumps(row))
    return 0


def run_ranks(mode: str, n: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="fuzzdist-cover-bench-") as tmp:
        result = subprocess.run(
            [sys.executable, __file__, "--_rank_child", mode, str(n), tmp], cwd=ROOT, text=True, capture_output=True
        )
        out = Path(tmp) / "result.json"
        if result.returncode != 0 or not out.exists():
            raise SystemExit(f"{mode}: the run failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return json.loads(out.read_text())


def ranks(args: argparse.Namespace) -> dict:
    from fuzzdist.pool.rank import line_cover

    modes = ["off", *(["monitoring"] if line_cover.best_mechanism() == "monitoring" else [])]
    modes += [*(["ctracer"] if line_cover.has_c_tracer() else []), "settrace"]
    rows: dict[str, list[dict]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else list(reversed(modes)):
            row = run_ranks(mode, args.examples)
            rows[mode].append(row)
            print(
                f"round {r + 1} {mode:>10}: {row.get('examples')} examples in {row.get('seconds', 0):.2f}s "
                f"({row.get('outcome')}), {row['lines']} lines of torch.distributed reached "
                f"(load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    print(
        f"\nDDP parity at 2 ranks, Python {sys.version.split()[0]}, {args.examples} examples, "
        f"{args.rounds} interleaved rounds: per-example time on / off (median of the rounds' ratios)"
    )
    ratios = {}
    for mode in modes[1:]:
        per_round = [on["seconds"] / off["seconds"] for on, off in zip(rows[mode], rows["off"], strict=True)]
        ratios[mode] = statistics.median(per_round)
        print(f"  {mode:<10} {ratios[mode]:.3f}x   (rounds: {', '.join(f'{x:.3f}' for x in per_round)})")
    return {"python": sys.version.split()[0], "rows": rows, "ratios": ratios}


# -- mechanisms: the collector alone, on each Python --------------------------------------------------

MECHANISM_CHILD = r"""
import email, email.parser, email.policy, importlib.util, json, os, sys, time
from fractions import Fraction
spec = importlib.util.spec_from_file_location("line_cover", sys.argv[1])
lc = importlib.util.module_from_spec(spec); spec.loader.exec_module(lc)
n, rounds = int(sys.argv[2]), int(sys.argv[3])
root = os.path.dirname(email.__file__)
MESSAGE = ("From: a@example.com\nTo: b@example.com\nSubject: =?utf-8?q?caf=C3=A9?= report\n"
           "Content-Type: multipart/mixed; boundary=XX\n\n--XX\nContent-Type: text/plain\n\nhello\n--XX--\n")

def target():
    msg = email.parser.Parser(policy=email.policy.default).parsestr(MESSAGE)
    return [str(msg["subject"])] + [part.get_content_type() for part in msg.walk()]

def other():
    x = Fraction(1)
    for i in range(1, 60):
        x = x * Fraction(i, i + 1) + Fraction(1, i)
    return x

modes = ["off", "settrace"] + (["monitoring"] if hasattr(sys, "monitoring") else [])
modes += ["ctracer"] if getattr(lc, "has_c_tracer", lambda: False)() else []
out = {w: {m: [] for m in modes} for w in ("target", "other")}
for r in range(rounds):
    for workload, fn in (("target", target), ("other", other)):
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            lc.request(None if mode == "off" else ((root,), mode, f"{workload}-{r}"))
            start = time.perf_counter()
            for _ in range(n):
                lc.begin(); fn(); lc.end()
            out[workload][mode].append((time.perf_counter() - start) / n)
lc.request(None)
print(json.dumps({"python": sys.version.split()[0], "times": out}))
"""


def mechanisms(args: argparse.Namespace) -> dict:
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    results = []
    for version in args.pythons.split(","):
        found = [Path(sys.executable)] if version == "venv" else sorted(root.glob(f"{version}.*/bin/python"))
        if not found:
            print(f"Python {version}: not installed under {root}, skipped")
            continue
        result = subprocess.run(
            [
                str(found[0]),
                "-c",
                MECHANISM_CHILD,
                str(ROOT / "fuzzdist/pool/rank/line_cover.py"),
                str(args.examples),
                str(args.rounds),
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if result.returncode != 0:
            raise SystemExit(f"Python {version}: {result.stderr}")
        data = json.loads(result.stdout)
        results.append(data)
        for workload, times in data["times"].items():
            off = times["off"]
            cells = []
            for mode, values in times.items():
                if mode == "off":
                    continue
                ratio = statistics.median(v / o for v, o in zip(values, off, strict=True))
                cells.append(f"{mode} {ratio:.2f}x")
            print(
                f"Python {data['python']:<8} {workload:<6} off {statistics.median(off) * 1e6:8.1f} us/example; "
                + ", ".join(cells)
                + f"   (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    return {"results": results}


# -- suite: whole campaigns, examples in the same budget -------------------------------------------------

SUITE = (
    "properties/test_broadcast.py",
    "properties/test_ddp_parity.py",
    "properties/test_p2p.py",
    "properties/test_autograd_collectives.py",
    "properties/test_object_collectives.py",
    "properties/test_dtensor_roundtrip.py",
)


def run_suite(mode: str, duration: int, targets: list[str]) -> dict:
    """One campaign in ``mode``; its examples (total and per property) and the lines it reached."""
    with tempfile.TemporaryDirectory(prefix="fuzzdist-cover-suite-") as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "fuzzdist", "run", "--duration", f"{duration}s", "--jobs", "1"]
        command += ["--database", str(Path(tmp) / "db"), "--report", str(report), "--progress", "none"]
        command += ["--junit", str(Path(tmp) / "junit.xml")]
        env = dict(os.environ)
        if mode != "off":
            command += ["--cover", "torch.distributed"]
            env["FUZZDIST_COVER_MECHANISM"] = mode
        result = subprocess.run(
            [*command, *targets], capture_output=True, text=True, timeout=duration + 900, cwd=ROOT, env=env
        )
        if not report.exists():
            said = f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
            raise SystemExit(f"{mode}: no report ({result.returncode}):\n{said}")
        data = json.loads(report.read_text())
    props = data.get("properties") or {}
    items = props.values() if isinstance(props, dict) else props
    examples = {p.get("nodeid"): p.get("examples", 0) for p in items}
    lines = (data.get("coverage") or {}).get("lines_reached")
    return {"examples": sum(examples.values()), "per_property": examples, "lines": lines}


def suite(args: argparse.Namespace) -> dict:
    modes = args.modes.split(",")
    rows: dict[str, list[dict]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else list(reversed(modes)):
            row = run_suite(mode, args.duration, args.targets or list(SUITE))
            rows[mode].append(row)
            print(
                f"round {r + 1} {mode:>10}: {row['examples']} examples in {args.duration}s, "
                f"lines {row['lines']} (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    print(f"\nwhole campaigns of {args.duration}s, {args.rounds} interleaved rounds: time per example on / off")
    ratios = {}
    for mode in modes[1:]:
        pairs = zip(rows[mode], rows[modes[0]], strict=True)
        per_round = [off["examples"] / max(1, on["examples"]) for on, off in pairs]
        ratios[mode] = statistics.median(per_round)
        print(f"  {mode:<10} {ratios[mode]:.3f}x   (rounds: {', '.join(f'{x:.3f}' for x in per_round)})")
    return {"python": sys.version.split()[0], "rows": rows, "ratios": ratios}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_rank_child":
        return _rank_child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["ranks", "mechanisms", "suite"])
    parser.add_argument("targets", nargs="*", help="suite: the campaign's targets (default: several families)")
    parser.add_argument("--duration", type=int, default=60, help="suite: seconds per campaign")
    parser.add_argument("--modes", default="off,ctracer,settrace", help="suite: off and the mechanisms compared")
    parser.add_argument(
        "--examples", type=int, default=None, help="examples per run (default: 60 for ranks, 300 for mechanisms)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default: 3, 5)")
    parser.add_argument("--pythons", default="venv,3.10,3.11,3.12,3.13", help="pyenv versions for mechanisms")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_intermixed_args()  # suite's targets may follow the options
    if args.part == "ranks":
        args.examples, args.rounds = args.examples or 60, args.rounds or 3
        data = ranks(args)
    elif args.part == "suite":
        args.rounds = args.rounds or 2
        data = suite(args)
    else:
        args.examples, args.rounds = args.examples or 300, args.rounds or 5
        data = mechanisms(args)
    data["load_at_end"] = os.getloadavg()
    data["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
