"""How a :class:`~fuzzdist.pool.local.RankPool` starts its rank processes: spawn, or fork from a server.

A spawned rank is a new interpreter: it imports torch (about 1.5 s of CPU)
before it can join its group, and a pool pays that for every rank at every
restart.  multiprocessing's *fork server* imports torch once, in a process
of its own that has done nothing else (no process group, no CUDA, no thread
of fuzzdist's), and forks each rank from it: a rank then costs a fork and
``init_process_group``.

``start_method="auto"`` (the default) picks the fork server where it is
safe and spawn elsewhere:

* the fork server where multiprocessing offers it on Linux, for CPU pools;
* spawn for CUDA pools (a CUDA context does not survive a fork, and the
  server must never be the process that first touches CUDA), and on
  platforms where fork without exec is unsafe (macOS) or missing (Windows);
* spawn when the driver's environment is no longer the one the server
  started in (forked ranks inherit the server's, and torch read it at
  import): see :func:`fork_server_fits`.

The environment variable ``FUZZDIST_START_METHOD=spawn`` makes ``auto``
spawn everywhere (``forkserver`` there still never forks a CUDA pool); an
explicit argument overrides both, and ``"forkserver"`` for a CUDA pool is an
error.
Ranks keep every guarantee either way: their process tree dies with them and
with the driver (a forked rank's parent is the fork server, which ends when
the driver does: see :func:`fuzzdist.pool.rank.spawned.rank_main`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from collections.abc import Collection
from typing import Any

from fuzzdist.errors import InvalidArgument
from fuzzdist.pool import leftovers

START_METHODS = ("auto", "spawn", "forkserver")
SPARE_MODES = ("auto", "always", "never")
ENV_VAR = "FUZZDIST_START_METHOD"
SPARES_VAR = "FUZZDIST_SPARES"
# What the server imports once, before it forks anything: torch, and the rank's own entry point.
PRELOAD = ["fuzzdist.pool.rank.spawned", "torch", "torch.distributed"]


def resolve_start_method(requested: str, device: str) -> str:
    """ "spawn" or "forkserver" for a pool on ``device``, from ``requested`` (one of START_METHODS)."""
    if requested not in START_METHODS:
        raise InvalidArgument(f"start_method={requested!r}: expected one of {', '.join(START_METHODS)}")
    if requested == "auto":
        chosen = _from_environment(ENV_VAR, START_METHODS, "spawn or forkserver")
        # The variable says what a pool forks where forking is safe; it never forks a CUDA pool.
        safe = chosen != "spawn" and fork_server_is_safe(device) and fork_server_fits() is None
        return "forkserver" if safe else "spawn"
    if requested == "forkserver" and device == "cuda":
        raise InvalidArgument(
            "start_method='forkserver' with device='cuda': CUDA pools start their ranks "
            "with spawn (a CUDA context does not survive a fork); use 'spawn' or 'auto'"
        )
    if requested == "forkserver" and "forkserver" not in mp.get_all_start_methods():
        raise InvalidArgument("start_method='forkserver': this platform has no fork server; use 'spawn' or 'auto'")
    if requested == "forkserver" and (why := fork_server_fits()) is not None:
        raise InvalidArgument(
            f"start_method='forkserver': {why}, and forked ranks would not see it; "
            "use 'spawn' or 'auto' (which spawns then)"
        )
    return requested


def fork_server_is_safe(device: str) -> bool:
    """Whether ``auto`` forks ranks from a server: CPU pools on Linux, where multiprocessing has one."""
    return device == "cpu" and sys.platform.startswith("linux") and "forkserver" in mp.get_all_start_methods()


def validate_spares(spares: str) -> str:
    """``spares``: when a pool keeps a replacement set of ranks started (see RankPool); ``auto`` defers to
    the environment variable ``FUZZDIST_SPARES`` (``never`` or ``always``) where it is set."""
    if spares not in SPARE_MODES:
        raise InvalidArgument(f"spares={spares!r}: expected one of {', '.join(SPARE_MODES)}")
    if spares == "auto":
        spares = _from_environment(SPARES_VAR, SPARE_MODES, "never, always or auto")
    return spares


# Variables that change while a run goes on and that no rank reads: the server's copy may be stale.
# fuzzdist's own two are read by the driver only, when it picks how to start a pool; torch sets
# TORCHINDUCTOR_CACHE_DIR in the driver itself, to the default a rank computes the same way, the
# first time anything touches inductor's cache.
_VOLATILE = frozenset({"PYTEST_CURRENT_TEST", ENV_VAR, SPARES_VAR, "TORCHINDUCTOR_CACHE_DIR"})
_server_env: dict[str, str] | None = None  # the environment the fork server started in, if fuzzdist started it
_unusable: str | None = None  # why the fork server could not be started here (then auto spawns)


def fork_server_fits() -> str | None:
    """None if ranks forked now get the environment the driver has now; else why they would not.

    Forked ranks inherit the server's environment, fixed when it started (torch read it at import),
    not the driver's at the time of the fork as spawned ranks do: a pool whose environment differs
    (a test that set ``TORCH_DISTRIBUTED_DEBUG``, a benchmark that turned a feature off) spawns.
    """
    from multiprocessing import forkserver

    if _unusable is not None:
        return _unusable
    running = getattr(forkserver._forkserver, "_forkserver_pid", None) is not None
    if _server_env is None:
        return "a fork server fuzzdist did not start is running" if running else None
    if not running:
        return None  # it will be started afresh, in today's environment
    now, then = _relevant(os.environ), _relevant(_server_env)  # both filtered by today's rules
    changed = sorted(k for k in now.keys() | then.keys() if now.get(k) != then.get(k))
    return f"the environment changed since the fork server started ({', '.join(changed[:5])})" if changed else None


def _relevant(env: Any) -> dict[str, str]:
    # pytest's own (PYTEST_VERSION, set once pytest.main starts; PYTEST_XDIST_*) concern the driver only.
    return {k: v for k, v in env.items() if k not in _VOLATILE and not k.startswith("PYTEST_")}


def start_fork_server_early(device: str = "cpu") -> bool:
    """Start the fork server now, where ``auto`` would fork a pool on ``device``, so that its torch import
    runs beside the driver's own start-up (a campaign collecting its properties) instead of inside the
    first pool's.  True if a server is running (or starting) afterwards."""
    from fuzzdist.pool.torchrun import in_torchrun

    if in_torchrun():
        return False  # torchrun's processes are the ranks
    try:
        if resolve_start_method("auto", device) != "forkserver":
            return False
    except InvalidArgument:
        return False  # a bad FUZZDIST_START_METHOD: the first pool says so
    try:
        context("forkserver")
    except OSError:
        return False  # said by fork_server_fits(): pools spawn
    return True


def context(method: str) -> Any:
    """The multiprocessing context that starts ranks with ``method`` (the fork server told what to preload
    and started, in the driver's environment, which :func:`fork_server_fits` compares with)."""
    global _server_env
    ctx = mp.get_context(method)
    if method == "forkserver":
        from multiprocessing import forkserver

        if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:
            ctx.set_forkserver_preload(PRELOAD)
            _server_env = _relevant(os.environ)
            try:
                # The server's socket goes in this process's pymp-* folder: owned, so that a later run
                # removes it if this driver is SIGKILLed.
                leftovers.own_multiprocessing_temp_dir()
                forkserver.ensure_running()
            except OSError as exc:
                # e.g. "AF_UNIX path too long": its socket lives in the temporary folder (TMPDIR)
                mark_unusable(f"the fork server could not start here ({exc})")
                raise
    return ctx


def mark_unusable(why: str) -> None:
    """From now on ``auto`` spawns in this process, because of ``why``."""
    global _unusable
    _unusable = why


def tree_memory(pid: int) -> int | None:
    """Proportional memory (PSS, bytes) of the process group ``pid`` leads: a rank and what it started
    (its watchdog, its children).  None where unknown (not Linux, or the rank is gone).

    PSS divides each page among the processes that hold it, so summed over processes it is their
    total: a rank forked from the fork server shares torch's pages with the server and its siblings,
    and its PSS is what it adds; a spawned rank holds its own copy of torch.
    """
    total = 0
    found = False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != pid:
                continue
            with open(f"/proc/{entry}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        found = True
                        break
        except (OSError, ValueError):
            continue  # ended meanwhile, or not ours to read
    return total if found else None


def _from_environment(var: str, choices: Collection[str], expected: str) -> str:
    """``var``'s value, ``auto`` where it is unset or blank; InvalidArgument, saying ``expected``, where it
    is none of ``choices``."""
    value = os.environ.get(var, "").strip() or "auto"
    if value not in choices:
        raise InvalidArgument(f"{var}={value!r}: expected {expected} (or unset it)")
    return value
