"""What every ``fuzzdist`` command shares: exit codes, the parser, argument types, bad input.

Bad input, whether argparse finds it (:class:`Parser`) or a command does
(:class:`UsageError`), is one line on stderr, ``fuzzdist CMD: error: ...``,
and exit code :data:`EXIT_USAGE`.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from typing import Any, NoReturn

EXIT_OK = 0  # nothing failed (check-pg: the group conforms)
EXIT_FOUND = 1  # a failure was found, a stored failure still fails, or a property errored
EXIT_USAGE = 2  # bad input: one line on stderr says what to do
EXIT_INTERNAL = 3  # pytest's own internal error (run, replay)
EXIT_NOT_KEPT = 4  # run: a failure was found that the example database did not keep (the report can replay it)
# 128+N: interrupted by signal N with nothing found (run, replay)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_S = 365 * 86400.0  # a year: past it a typo, not a campaign


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (not argparse's usage block) and exit code 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # '-5s' is a value (a negative duration, refused by its type with a reason), not an unknown option:
        # argparse only takes '-5' and '-5.0' for values.
        self._negative_number_matcher = re.compile(r"^-\d+(\.\d+)?[smhd]?([\d.]+[smhd])*$|^-\.\d+$")

    def error(self, message: str) -> NoReturn:
        from fuzzdist.campaign.database import redact
        from fuzzdist.campaign.plain_text import plain

        # The message may quote an argument: a Redis URL's password is not repeated, nor a control character.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {plain(redact(message))} (see {self.prog} --help)\n")


def parse_duration(text: str) -> float:
    """``30s``, ``10m``, ``2h``, ``1h30m``, ``1.5h``, ``1d``; a bare number is seconds."""
    spec = text.strip().lower()
    if spec.startswith("-"):
        raise argparse.ArgumentTypeError(f"bad --duration {text!r}: it must be longer than 0s, e.g. 30s or 10m")
    if re.fullmatch(r"\d+(\.\d+)?", spec):
        seconds = float(spec)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", spec)
        if not parts or "".join(n + u for n, u in parts) != spec:
            raise argparse.ArgumentTypeError(
                f"bad --duration {text!r}: use a number and a unit, e.g. 30s, 10m, 2h or 1h30m"
            )
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"bad --duration {text!r}: it must be longer than 0s")
    if seconds > MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"bad --duration {text!r}: it is more than a year; pass 365d or less")
    return seconds


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 seconds")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds: give one, e.g. 30")
    return value


def timeout_seconds(text: str) -> float:
    """An argparse type for a per-example timeout: finite, and within what a pool can do
    (:func:`fuzzdist.pool.controller.timeout_problem`)."""
    from fuzzdist.pool.controller import timeout_problem

    value, problem = timeout_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def world_size(text: str) -> int:
    """An argparse type for ``--world-size``: a whole number of ranks from 1 to what this machine can hold
    (not checked under torchrun, whose processes exist already)."""
    value = positive_int(text)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return value
    from fuzzdist.pool.capabilities.pool_args import too_many_ranks

    reason = too_many_ranks(value)
    if reason:
        raise argparse.ArgumentTypeError(f"{text}: {reason}")
    return value


def check_outputs(*outputs: tuple[str, str | None]) -> None:
    """Refuse, before anything runs, an output path (``(flag, path)``; None or '' for none) that can't be
    written (a folder, a missing folder, no permission) or that another output names too: one line, exit 2
    (:class:`~fuzzdist.errors.UsageError`)."""
    from fuzzdist.campaign.output import check_output, same_output
    from fuzzdist.errors import UsageError

    given = [(flag, path) for flag, path in outputs if path]
    for flag, path in given:
        reason = check_output(path)
        if reason is not None:
            raise UsageError(f"can't write {path} ({reason}): pass {flag} with a path in a writable directory")
    for i, (flag, path) in enumerate(given):
        for other_flag, other in given[i + 1 :]:
            if same_output(path, other) and not _special(path):  # two outputs to /dev/null are fine
                raise UsageError(
                    f"{flag} and {other_flag} both name {path}: each would overwrite the other; "
                    "give them different files"
                )


def _special(path: str) -> bool:
    """A device or FIFO: written to in place, never replaced."""
    import stat

    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False
