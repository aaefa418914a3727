"""``fuzzdist replay --export-script DIR``: each stored failure as a standalone script.

A campaign stores the failures of four planted bugs (a rank raising, a rank process dying, wrong
results the test body rejects, and fuzzdist's own broadcast property fed a planted broadcast);
the exported scripts must say BUG and exit 1, then FIXED and exit 0 once the plant is removed,
without pytest or Hypothesis running.  Bad ``DIR`` is one line and exit 2 before anything runs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.cli_helpers import CLI_TIMEOUT, cli_env, run_cli, write

PROPERTIES = """
import os

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, strategies as st

from fuzzdist.properties import broadcast

PLANTED = True


def check(ctx, n):
    if PLANTED and n >= 1000 and ctx.rank == 1:
        raise ValueError(f"planted bug: n={n}")


def die(ctx, n):
    if PLANTED and n >= 3 and ctx.rank == 1:
        os._exit(7)


def summed(ctx, n):
    t = torch.tensor([float(n)])
    dist.all_reduce(t, group=ctx.group)
    if PLANTED and n >= 7 and ctx.rank == 0:
        t += 1
    return t.item()


def planted_broadcast(tensor, src, group=None):
    dist.broadcast(tensor, src, group=group)
    if PLANTED and tensor.numel() > 1 and dist.get_rank(group) != src:
        tensor.view(-1)[0] = tensor.view(-1)[-1]


@pytest.mark.fuzzdist(world_size=2)
@given(n=st.integers(0, 10**6))
def test_raises(rank_pool, n):
    rank_pool.run(check, 0)  # an earlier call that passes: the script runs it first
    rank_pool.run(check, n)


@pytest.mark.fuzzdist(world_size=2)
@given(n=st.integers(0, 100))
def test_dies(rank_pool, n):
    rank_pool.run(die, n)


@pytest.mark.fuzzdist(world_size=2)
@given(n=st.integers(0, 100))
def test_results(rank_pool, n):
    got = rank_pool.run(summed, n)
    assert got == [2.0 * n] * 2, got


@pytest.mark.fuzzdist(world_size=2)
@given(spec=broadcast.SPECS, seed=broadcast.SEEDS)
def test_own(rank_pool, spec, seed):
    broadcast.check(rank_pool, spec, 0, seed, broadcast=planted_broadcast)
"""

NAMES = ["test_raises", "test_dies", "test_results", "test_own"]


def _script(project, name):
    return project / "out" / f"test_props-{name}-cpu-w2-1.py"


def _run_script(path):
    # A clean environment: no PYTHONPATH, so the script finds the test's module through its own PATHS.
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, str(path)], cwd="/", env=env, text=True, capture_output=True, timeout=CLI_TIMEOUT
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(project dir, replay result): the four planted failures stored and exported."""
    project = tmp_path_factory.mktemp("export")
    write(project, "test_props.py", PROPERTIES)
    campaign = run_cli(
        ["run", "test_props.py", "--max-examples", "60", "--database", "db", "--report", "r.json", "--junit", ""],
        cwd=project,
    )
    assert campaign.returncode == 1, campaign.stdout + campaign.stderr
    result = run_cli(["replay", "--database", "db", "--export-script", "out", "test_props.py"], cwd=project)
    assert result.returncode == 1, result.stdout + result.stderr
    return project, result


def test_each_failure_is_exported_and_says_bug_then_fixed(exported):
    project, result = exported
    for name in NAMES:
        assert f"script: out/test_props-{name}-cpu-w2-1.py (exits 1 while it fails, 0 once fixed)" in result.stdout, (
            result.stdout
        )
    assert "4 exported as scripts" in result.stdout.splitlines()[-1]
    text = _script(project, "test_own").read_text()
    assert "It imports fuzzdist" in text and "fuzzdist's own" in text  # its rank function is fuzzdist's
    assert "The pickled calls name no fuzzdist module" in _script(project, "test_raises").read_text()
    assert "import hypothesis" not in text and "import pytest" not in text
    lines = {
        "test_raises": "BUG: rank 1 raised builtins.ValueError: planted bug: n=1000",
        "test_dies": "BUG: rank process died again: rank 1 (exit code 7)",
        "test_results": "BUG: the ranks returned the results the property rejected: [15.0, 14.0]",
        "test_own": "BUG: the ranks returned the results the property rejected: [None, Problem('1 of 2 elements differ",
    }
    for name in NAMES:
        run = _run_script(_script(project, name))
        assert run.returncode == 1, (name, run.stdout, run.stderr)
        out = run.stdout.strip().splitlines()
        assert len(out) == 1 and out[0].startswith(lines[name]), (name, run.stdout)
    # The plant removed: every script now passes.
    path = project / "test_props.py"
    path.write_text(path.read_text().replace("PLANTED = True", "PLANTED = False"))
    try:
        for name in NAMES:
            run = _run_script(_script(project, name))
            assert run.returncode == 0, (name, run.stdout, run.stderr)
            assert run.stdout.strip().startswith("FIXED: "), (name, run.stdout)
            assert len(run.stdout.strip().splitlines()) == 1
    finally:
        path.write_text(path.read_text().replace("PLANTED = False", "PLANTED = True"))


def test_an_existing_script_is_never_overwritten(exported):
    project, _ = exported
    first = _script(project, "test_raises")
    before = first.read_text()
    again = run_cli(["replay", "--database", "db", "--export-script", "out", "test_props.py::test_raises"], cwd=project)
    assert "script: out/test_props-test_raises-cpu-w2-1-2.py" in again.stdout, again.stdout
    assert first.read_text() == before


@pytest.mark.parametrize("case", ["file", "symlink", "unwritable", "empty"])
def test_bad_export_dir_is_one_line_and_exit_2_before_anything_runs(exported, tmp_path, monkeypatch, capsys, case):
    from fuzzdist.cli import main

    project, _ = exported
    if case == "file":
        target = tmp_path / "a-file"
        target.write_text("x")
        expect = "is not a directory"
    elif case == "symlink":
        real = tmp_path / "real"
        real.mkdir()
        target = tmp_path / "link"
        target.symlink_to(real)
        expect = "is a symbolic link"
    elif case == "unwritable":
        target = "/proc/self/fuzzdist-scripts"  # no one can make a directory there, root included
        expect = "can't use --export-script"
    else:
        target = ""
        expect = "--export-script is empty"
    monkeypatch.chdir(project)  # the command's own main, in this process: refused before anything starts
    code = main(["replay", "--database", "db", "--export-script", str(target), "test_props.py"])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert out == "", out  # nothing ran
    assert len(err.strip().splitlines()) == 1 and expect in err, err
    if case == "symlink":
        assert os.listdir(tmp_path / "real") == []


# -- the script's code: fuzzdist's own, with torch alone ---------------------------------------

PLANT = """
def fails_on_rank_1(ctx, n):
    if ctx.rank == 1 and n > 2:
        raise ValueError(f"planted: n={n}")
"""


@pytest.fixture
def planted_script(tmp_path, monkeypatch):
    """(script path, its text): a script for a planted rank function in a module of its own, exported
    from a recording made here (no campaign), its PATHS that module's folder only."""
    import importlib

    from fuzzdist.campaign import export_script
    from fuzzdist.pool.controller import derive_seed, pickle_call

    project = tmp_path / "project"
    project.mkdir()
    write(project, "export_plant.py", PLANT)
    monkeypatch.syspath_prepend(str(project))
    plant = importlib.import_module("export_plant")
    monkeypatch.setattr(export_script, "_project_paths", lambda: [str(project)])
    recording = export_script.Recording(world_size=2, backend="gloo", device="cpu", timeout=30.0)
    for n in (0, 3):  # an earlier call that passes, then the failing one
        payload = pickle_call(plant.fails_on_rank_1, (n,), {})
        recording.calls.append(export_script.Call(payload, derive_seed(payload), "export_plant.fails_on_rank_1"))
    failed = {"kind": "raised", "types": {1: "builtins.ValueError"}, "summary": "ValueError: planted: n=3"}
    text = export_script.render(
        "export_plant.py::test_x",
        "ValueError",
        "test_x(n=3)",
        recording,
        failed,
        torch_version="2.13.0",
        script_name="planted.py",
    )
    path = tmp_path / "planted.py"
    path.write_text(text)
    return path, text


def test_the_script_seeds_each_call_as_the_ranks_do(planted_script):
    """The seeding a script holds is the ranks' own: its source is in the script, and the script's copy
    leaves random, torch and numpy in the states the ranks' seeding leaves them in."""
    import inspect
    import random
    import runpy

    import numpy
    import torch

    from fuzzdist.pool.rank import isolation

    path, text = planted_script
    assert inspect.getsource(isolation.seed_everything) in text
    script = runpy.run_path(str(path), run_name="exported_script")  # its __main__ block doesn't run

    def states_after(seed_everything, seed):
        seed_everything(seed)
        return random.getstate(), torch.get_rng_state(), numpy.random.get_state()[1].tolist()

    assert script["seed_everything"] is not isolation.seed_everything
    for seed in (0, 1, 2**32 + 5, 2**63 - 1):
        (r1, t1, n1), (r2, t2, n2) = (
            states_after(script["seed_everything"], seed),
            states_after(isolation.seed_everything, seed),
        )
        assert r1 == r2 and torch.equal(t1, t2) and n1 == n2, seed
    previous = states_after(isolation.seed_everything, 1)
    assert not torch.equal(previous[1], states_after(isolation.seed_everything, 2)[1])  # the check can tell


def test_the_script_runs_with_torch_alone(planted_script, tmp_path):
    """No fuzzdist in the script's code: run where importing fuzzdist fails, it still says BUG."""
    path, text = planted_script
    assert not [line for line in text.splitlines() if line.lstrip().startswith(("import fuzzdist", "from fuzzdist"))]
    poison = tmp_path / "poison" / "fuzzdist"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text('raise ImportError("the exported script imported fuzzdist")\n')
    env = {**cli_env(), "PYTHONPATH": str(poison.parent)}
    run = subprocess.run(
        [sys.executable, str(path)], cwd="/", env=env, text=True, capture_output=True, timeout=CLI_TIMEOUT
    )
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert run.stdout.startswith("BUG: rank 1 raised builtins.ValueError: planted: n=3"), run.stdout
    assert "imported fuzzdist" not in run.stderr


def test_a_planted_link_or_an_existing_file_is_never_written_through_or_over(tmp_path):
    """Scripts are written by campaign/output.py's create_output: a new file, whole, under a free name."""
    from fuzzdist.campaign.export_script import ExportDir

    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "failure.py").symlink_to(outside)
    (scripts / "failure-2.py").write_text("an older script")
    export_dir = ExportDir(str(scripts))
    path = export_dir.write("failure", "print('hi')\n")
    assert path == scripts / "failure-3.py" and path.read_text() == "print('hi')\n"
    assert outside.read_text() == "keep me" and (scripts / "failure-2.py").read_text() == "an older script"
    assert sorted(os.listdir(scripts)) == ["failure-2.py", "failure-3.py", "failure.py"]  # no temporary file left
