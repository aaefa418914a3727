"""A spawned rank's whole process tree lives no longer than the rank and its driver.

A rank may start processes of its own (a ProcessGroup that runs its real
group in a child process, as fault-tolerant groups do).  So that nothing it
started outlives it, each rank:

* starts a session of its own (:func:`lead_own_group`): every process it
  starts is in the rank's process group (``pgid == rank pid``) unless it
  leaves it itself, and the driver kills the whole group with one SIGKILL
  (:func:`kill_tree`) whenever it kills the rank: a restart, a recycle, a
  hang, a crash, ``close()``;
* forks a small watchdog (:func:`start_watchdog`) that SIGKILLs the group as
  soon as the rank dies (a crash, or its own exit) or the driver does (the
  driver's end of the rank's pipe hangs up).  It is a process of its own,
  single-threaded, so a rank wedged with the GIL held can't stall it (the
  driver's hang-up is watched on Linux; elsewhere the rank's own thread
  that watches its parent does that part);
* on Linux, asks the kernel to SIGKILL it when the driver dies
  (:func:`die_with_driver`), whatever the rank is doing; the watchdog then
  sees the rank gone and kills the rest.

SIGKILL throughout: a child that ignores or handles SIGTERM dies all the
same.  A descendant that moves to a process group of its own (``setsid``,
``setpgid``) has opted out and is its own business.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys

_WATCH_MS = 200  # how often the watchdog looks whether the rank is still there
_PR_SET_PDEATHSIG = 1


def lead_own_group() -> bool:
    """Make this process the leader of a new session and process group; False if it could not."""
    try:
        os.setsid()
    except OSError:
        pass
    return os.getpgid(0) == os.getpid()


def kill_tree(pid: int | None, started: int | None = None) -> None:
    """SIGKILL the process group a rank leads (the rank and what it started); no-op if there is none.

    Call it before the rank is reaped: until then no other group can have its id.  A rank forked by
    the fork server is reaped by the server the moment it ends, so for those pass ``started``, the
    rank's :func:`start_time`: while any process of the rank's group lives its id can't be reused, and
    once a process with that pid but another start time exists the rank's group is gone, and the
    group of that id (if any) is a stranger's, left alone.
    """
    if pid is None:
        return
    if started is not None:
        now = start_time(pid)
        if now is not None and now != started:
            return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, Linux's /proc), None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name before ")" may hold spaces
    except (IndexError, ValueError):
        return None


def kill_own_tree(exit_code: int) -> None:
    """From inside a rank: SIGKILL its whole group (itself included), or just exit if it leads none."""
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(exit_code)


def die_with_driver(driver_pid: int, signum: int = signal.SIGKILL) -> bool:
    """Linux: the kernel sends ``signum`` (SIGKILL) to this process when the driver dies; False elsewhere.

    PR_SET_PDEATHSIG fires when the *thread* that started the process ends,
    so the driver asks for it only for ranks started from its main thread.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != driver_pid:  # the driver died before the request took hold
        kill_own_tree(70)
    return True


def start_watchdog(lifeline_fd: int) -> int | None:
    """Fork the watchdog that SIGKILLs this rank's group when the rank dies or ``lifeline_fd`` hangs up.

    ``lifeline_fd`` is the rank's end of a pipe or socket whose other end only the
    driver holds.  Call first thing in the rank, before it starts threads.
    Returns the watchdog's pid (None where fork is missing or failed).
    """
    if not hasattr(os, "fork") or os.getpgid(0) != os.getpid():
        return None  # no group of its own to kill
    rank_pid = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid:
        return pid
    try:  # the watchdog: never return into the rank's code
        _watch(rank_pid, lifeline_fd)
    finally:
        os._exit(0)


def _watch(rank_pid: int, lifeline_fd: int) -> None:
    with contextlib.suppress(OSError):  # hold nothing of the rank's: its pipes, files, the driver's stdout
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, lifeline_fd)
        os.closerange(lifeline_fd + 1, max(lifeline_fd + 2, os.sysconf("SC_OPEN_MAX")))
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_DFL)
    poller = select.poll()
    if sys.platform.startswith("linux"):  # POLLHUP with no events asked for: checked to work
        poller.register(lifeline_fd, 0)  # only POLLHUP/POLLERR: the driver's end closed (never the rank's messages)
    while os.getppid() == rank_pid:
        try:
            if poller.poll(_WATCH_MS):
                break
        except InterruptedError:
            continue
    if os.getpgid(0) == rank_pid:
        os.killpg(rank_pid, signal.SIGKILL)  # the rank, everything it started, and this watchdog
