"""Inside a rank that :class:`~fuzzdist.pool.local.RankPool` spawned: its entry point and what runs
beside the example's thread.

:func:`rank_main` is the target of the spawned ``Process`` (pickled by its
module and name, so the rank imports this module, not the driver's): it puts
the rank in its own process tree, sends its stdout and stderr to the pool's
file, starts the watch threads (the driver's snapshot requests; the
driver's death), arms faulthandler, joins the group over a FileStore and
lets a :class:`~fuzzdist.pool.rank.worker.Worker` answer the pipe.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn

from fuzzdist.pool import framing, leftovers, messages
from fuzzdist.pool.rank import process_tree, rank_state
from fuzzdist.pool.rank import rank_output as rank_output_mod
from fuzzdist.pool.rank.worker import Worker, answer_snapshot

STACK_SIGNAL = signal.SIGUSR1  # the driver sends it to dump a hung rank's stack


@dataclass(frozen=True)
class RankSpec:
    """What a spawned rank needs to join its pool's group."""

    rank: int
    world_size: int
    backend: str
    device_type: str  # "cpu" or "cuda"
    pg_timeout_s: float
    num_threads: int  # intra-op threads: the ranks share the machine's cores
    store_path: str
    tmpdir: str
    stack_path: str  # faulthandler writes the stack here on STACK_SIGNAL
    crash_path: str  # ... and here on a fatal signal (SIGSEGV, SIGABRT, ...)
    output_path: str | None  # the rank's stdout and stderr go here (None: left alone)
    driver_pid: int = 0  # the process that started the rank
    from_main_thread: bool = False  # spawned from the driver's main thread (see process_tree.die_with_driver)
    forked: bool = False  # forked by multiprocessing's fork server (see _leave_fork_server), not spawned


def rank_main(spec: RankSpec, inbox: Any, outbox: Any, watch: Any, stdio: tuple[int, int] | None = None) -> None:
    """Entry point of a rank process (the target of the pool's ``Process``): ``inbox`` and ``outbox`` are
    its ends of the one-way pipes from and to the driver, ``watch`` the snapshot requests' socket,
    ``stdio`` (forked ranks) the driver's stdout and stderr as they are now (see :class:`InheritedFd`)."""
    # The rank's process tree dies with it and with the driver (see process_tree), so it may start processes.
    if spec.forked:
        _leave_fork_server()
    if stdio is not None:
        _adopt_stdio(stdio)
    if process_tree.lead_own_group():
        process_tree.start_watchdog(inbox.fileno())  # hangs up when the driver's end closes
    if spec.forked:
        process_tree.die_with_driver(os.getppid())  # the fork server, which ends when the driver does
    elif spec.from_main_thread:
        process_tree.die_with_driver(spec.driver_pid)
    mp.current_process().daemon = False
    with contextlib.suppress(OSError):  # a full $TMPDIR: the rank goes on, its folder (if any) not owned
        # Its own multiprocessing folder (where file_descriptor sharing puts a socket), owned from the start:
        # if the rank is SIGKILLed, the pool's restart or the next run removes it.
        leftovers.own_multiprocessing_temp_dir()
    if spec.output_path is not None:
        rank_output_mod.install(spec.output_path)
    _exit_with_parent()
    _answer_snapshots(watch)
    rank_state.enable_flight_recorder(spec.backend)
    stack_file = open(spec.stack_path, "w")  # noqa: SIM115 - lives as long as the process
    crash_file = open(spec.crash_path, "w")  # noqa: SIM115
    faulthandler.register(STACK_SIGNAL, file=stack_file, all_threads=True)
    faulthandler.enable(file=crash_file, all_threads=True)
    channel = _PipeChannel(inbox, outbox)
    try:
        ctx = _join_group(spec)
    except BaseException:  # noqa: BLE001 - every start-up failure goes back to the driver
        channel.send(messages.init_error(traceback.format_exc()))
        return
    channel.send(messages.ready(os.getpid()))
    _serve_then_exit(lambda: Worker(ctx).serve(channel))


def _leave_fork_server() -> None:
    """A rank forked by the fork server drops what it inherited of the server's: its copy of the "alive"
    pipe, which every child of the server holds and which keeps the server running until the last
    holder is gone.  Without it the server ends as soon as the driver does, and with the server every
    rank it forked (their parent-death signal, :func:`process_tree.die_with_driver`).  A rank that
    starts processes with the fork server itself then starts a server of its own."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
    for name in ("_forkserver_alive_fd", "_forkserver_address", "_forkserver_pid"):
        setattr(server, name, None)


class InheritedFd:
    """A descriptor of the driver's that a rank receives when it starts, as multiprocessing hands over a
    Connection's: pickled only while the pool starts a process (it needs the starting Popen), unpickled
    in the rank as the rank's own descriptor number.

    A forked rank's stdout and stderr are otherwise the fork server's, fixed when the server started
    (under pytest's capture, perhaps the capture file of whichever test started it); spawned ranks get
    the driver's current ones, and so, through this, do forked ranks.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        from multiprocessing import reduction

        return (_detach, (reduction.DupFd(self.fd),))


def _detach(dup: Any) -> int:
    return int(dup.detach())


def _adopt_stdio(stdio: tuple[int, int]) -> None:
    for fd, target in zip(stdio, (1, 2), strict=True):
        if fd != target:
            with contextlib.suppress(OSError):
                os.dup2(fd, target)
                os.close(fd)


def _serve_then_exit(serve: Callable[[], object]) -> NoReturn:
    """Run the rank's serve loop, leave the group and end the process with os._exit, also when an error
    escapes: never through multiprocessing's exit handler, which joins the non-daemon processes the rank
    started with no time limit (the rank's watchdog kills what is left of its tree once it is gone), and
    skipping the interpreter's teardown of torch (a second or more: nothing is left to flush)."""
    code = 0
    try:
        serve()
        _leave_group()
    except BaseException:  # noqa: BLE001 - said on stderr, then the rank ends: the driver sees a crash
        code = 1
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        leftovers.before_os_exit()  # the pymp-* folder of file_descriptor sharing, without the joins
        os._exit(code)


class _PipeChannel:
    """A spawned rank's end of its pipe (a :class:`~fuzzdist.pool.rank.worker.Channel`)."""

    lost_exit_code = 0  # the driver went away: leave quietly

    def __init__(self, inbox: Any, outbox: Any) -> None:
        self._inbox, self._outbox = inbox, outbox  # kept: they own the descriptors
        self._reader = framing.Reader(inbox.fileno())
        self._out_fd = outbox.fileno()

    def receive(self) -> messages.Message | None:
        try:
            return messages.load(self._reader.recv())
        except (EOFError, OSError):  # the driver went away
            return None

    def send(self, data: bytes) -> bool:
        try:
            framing.send(self._out_fd, data)
            return True
        except (BrokenPipeError, OSError):
            return False


def _join_group(spec: RankSpec) -> Any:
    import torch
    import torch.distributed as dist

    from fuzzdist.pool.rank.context import RankContext

    if spec.backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        # Keep gloo's pairs on loopback, never on the host's public address.
        os.environ["GLOO_SOCKET_IFNAME"] = _loopback_interface()
    if spec.device_type == "cuda":
        device = torch.device("cuda", spec.rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.set_num_threads(spec.num_threads)
    store = dist.FileStore(spec.store_path, spec.world_size)
    kwargs: dict[str, Any] = {}
    if spec.backend == "nccl":
        kwargs["device_id"] = device  # eager init: a broken GPU fails here, not mid-example
    dist.init_process_group(
        spec.backend,
        store=store,
        rank=spec.rank,
        world_size=spec.world_size,
        timeout=timedelta(seconds=spec.pg_timeout_s),
        **kwargs,
    )
    group = dist.group.WORLD
    return RankContext(spec.rank, spec.world_size, device, spec.backend, group, store, spec.tmpdir)


def _leave_group() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - leaving the group is best effort: the process is ending
        pass


def _loopback_interface() -> str:
    names = [name for _, name in socket.if_nameindex()]
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return next((n for n in names if n.startswith("lo")), "lo")


def _answer_snapshots(conn: Any) -> None:
    """A thread that answers the driver's snapshot requests, even while the example's thread is stuck."""

    def answer() -> None:
        while True:
            try:
                message = messages.load(conn.recv_bytes())
                conn.send_bytes(messages.dispatch(_Watcher, message))
            except (EOFError, OSError):  # the driver went away
                return
            except Exception:  # noqa: BLE001 - this thread must outlive one bad request: hangs need it
                traceback.print_exc()  # unanswered, the request reads as "did not answer"

    threading.Thread(target=answer, name="fuzzdist-watch", daemon=True).start()


class _Watcher:
    on_snapshot = staticmethod(answer_snapshot)


def _exit_with_parent() -> None:
    """Die when the driver dies, even while stuck in a collective, and take what the rank started along."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                process_tree.kill_own_tree(70)

    threading.Thread(target=watch, name="fuzzdist-parent-watch", daemon=True).start()
