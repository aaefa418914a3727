"""How many campaign workers ``fuzzdist run`` starts when ``--jobs`` is not given.

The rule (docs/campaigns.md, "Several workers"): on CPU, one worker per core this process may use,
as many as the available memory holds at ``WORKER_MEMORY_BYTES`` each, at least one:

    jobs = max(1, min(cores, available memory // WORKER_MEMORY_BYTES))

One worker under torchrun (torchrun forms one pool) and with ``--device cuda`` (each worker needs its
own GPUs: give ``--jobs`` to split them).  ``$FUZZDIST_JOBS`` (a whole number) replaces the rule, for a
machine whose users want a fixed default (e.g. CI runners sharing a host).
"""

from __future__ import annotations

import os

from fuzzdist.errors import UsageError

# One worker's resident memory, measured on the property suite with --jobs 1: its driver (~350 MiB),
# the fork server (~240 MiB) and the ranks of its 2- and 4-rank pools (~170 MiB each), rounded up.
WORKER_MEMORY_BYTES = 2 * 1024**3
JOBS_ENV = "FUZZDIST_JOBS"


def available_memory() -> int | None:
    """Bytes of memory available to start processes without swapping (None: unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def jobs_rule(cores: int, memory: int | None) -> int:
    """The default number of workers on CPU: one per core, as many as ``memory`` holds, at least one."""
    fits = cores if memory is None else memory // WORKER_MEMORY_BYTES
    return max(1, min(cores, fits))


def default_jobs(
    device: str | None,
    in_torchrun: bool,
    cores: int,
    memory: int | None,
    env: dict[str, str] | os._Environ[str] = os.environ,
) -> int:
    """``--jobs`` when it is not given (see the module's docstring)."""
    fixed = env.get(JOBS_ENV, "").strip()
    if fixed:
        try:
            value = int(fixed)
        except ValueError:
            value = 0
        if value < 1:
            raise UsageError(
                f"${JOBS_ENV}={fixed!r} is not a number of workers: set it to a whole number, "
                f"at least 1, or unset it to use the cores"
            )
        return value
    if in_torchrun or device == "cuda":
        return 1
    return jobs_rule(cores, memory)
