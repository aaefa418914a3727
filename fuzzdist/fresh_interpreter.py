"""Asking a fresh interpreter: run a probe module with ``python -m`` and read the one answer it prints.

What the installed torch can do is sometimes asked of a process of its own: one that must not start a
CUDA context in the driver, or that initialises a process group the driver must not hold.  Every such
probe is a real module of fuzzdist (linted and type-checked like the rest), run as
``python -m <module> <args>``, which ends by calling :func:`print_answer`; the caller reads that line
with :func:`ask`.  The strategies' dtype probe and the pool's gloo probe both go through here.

A leaf: it imports nothing of fuzzdist, so that every layer may use it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

# Marks the answer line, so that anything else the probe prints (torch's warnings) is never read as it.
ANSWER_PREFIX = "FUZZDIST-PROBE-ANSWER "

# The folder that holds this fuzzdist package: the child runs there, so that ``-m`` finds this very copy
# (``-m`` puts the working directory first on sys.path), installed or not.
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Answer:
    """What a probe answered: ``value``, the JSON value it printed, or None and ``why`` there is none."""

    value: Any = None
    why: str = ""

    @property
    def given(self) -> bool:
        """Whether the probe printed an answer."""
        return not self.why


def print_answer(value: Any) -> None:
    """Print ``value`` (JSON-serialisable) as the probe's answer: called once, by the probe module."""
    print(ANSWER_PREFIX + json.dumps(value), flush=True)


def ask(module: str, *args: str, timeout: float) -> Answer:
    """Run ``python -m module *args`` in a fresh interpreter and return the answer it printed.

    Never raises for the probe's sake: an interpreter that can't start, a probe that runs past
    ``timeout`` seconds, dies, or prints no answer or one that isn't JSON gives an :class:`Answer` whose
    ``why`` says so, with the end of its stderr.  Its stdin is empty: a probe never waits for input.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            cwd=_PACKAGE_PARENT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Answer(why=f"python -m {module} gave no answer within {timeout:g} s")
    except OSError as exc:
        return Answer(why=f"could not start python -m {module}: {exc}")
    lines = [line for line in done.stdout.splitlines() if line.startswith(ANSWER_PREFIX)]
    stderr = done.stderr.strip()[-300:]
    if not lines:
        said = f"; {stderr}" if stderr else ""
        return Answer(why=f"python -m {module} printed no answer (exit status {done.returncode}){said}")
    try:
        return Answer(value=json.loads(lines[-1][len(ANSWER_PREFIX) :]))
    except ValueError as exc:
        return Answer(why=f"python -m {module} printed an answer that is not JSON ({exc})")
