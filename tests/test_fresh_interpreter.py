"""Asking a fresh interpreter: the answer is read amid other output, and every way a probe fails is a reason."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import fuzzdist
from fuzzdist import fresh_interpreter
from fuzzdist.fresh_interpreter import ANSWER_PREFIX


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """Write a probe module ``name`` with ``source`` where the child finds it (PYTHONPATH); return its name."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))

    def plant(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        return name

    return plant


def test_the_answer_is_read_among_other_output(planted):
    module = planted(
        "planted_chatty_probe",
        f"""
        import sys
        print("a warning torch printed")
        print({ANSWER_PREFIX!r} + '{{"took": [1, 2]}}')
        print("more output after the answer")
        print("and on stderr", file=sys.stderr)
    """,
    )
    answer = fresh_interpreter.ask(module, timeout=60)
    assert answer.given and answer.value == {"took": [1, 2]}


def test_the_arguments_reach_the_probe(planted):
    module = planted(
        "planted_echo_probe",
        """
        import sys
        from fuzzdist.fresh_interpreter import print_answer
        print_answer(sys.argv[1:])
    """,
    )
    assert fresh_interpreter.ask(module, "cpu", "a,b", timeout=60).value == ["cpu", "a,b"]


def test_a_probe_that_prints_no_answer_says_why(planted):
    module = planted(
        "planted_dying_probe",
        """
        import sys
        print("not an answer")
        sys.exit("planted: the probe died")
    """,
    )
    answer = fresh_interpreter.ask(module, timeout=60)
    assert not answer.given and answer.value is None
    assert answer.why == "python -m planted_dying_probe printed no answer (exit status 1); planted: the probe died"


def test_an_answer_that_is_not_json_says_why(planted):
    module = planted("planted_garbled_probe", f"print({ANSWER_PREFIX!r} + '{{not json')")
    answer = fresh_interpreter.ask(module, timeout=60)
    assert not answer.given and answer.why.startswith(
        "python -m planted_garbled_probe printed an answer that is not JSON"
    )


def test_a_probe_past_its_timeout_is_stopped(planted):
    module = planted("planted_slow_probe", "import time; time.sleep(60)")
    answer = fresh_interpreter.ask(module, timeout=1)
    assert answer.why == "python -m planted_slow_probe gave no answer within 1 s"


def test_a_probe_reading_stdin_reads_nothing(planted):
    """A probe never waits for input: its stdin is empty, not the caller's."""
    module = planted(
        "planted_reading_probe",
        """
        import sys
        from fuzzdist.fresh_interpreter import print_answer
        print_answer(sys.stdin.read())
    """,
    )
    assert fresh_interpreter.ask(module, timeout=60).value == ""


def test_the_child_runs_this_fuzzdist_whatever_the_working_directory(planted, tmp_path, monkeypatch):
    """``-m`` puts the working directory first on sys.path: another fuzzdist there must not be the one run."""
    other = tmp_path / "elsewhere" / "fuzzdist"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise ImportError('planted: the wrong fuzzdist')\n", encoding="utf-8")
    monkeypatch.chdir(other.parent)
    module = planted(
        "planted_where_probe",
        """
        import fuzzdist
        from fuzzdist.fresh_interpreter import print_answer
        print_answer(fuzzdist.__file__)
    """,
    )
    assert Path(fresh_interpreter.ask(module, timeout=120).value) == Path(fuzzdist.__file__)
