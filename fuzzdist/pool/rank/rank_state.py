"""Inside a rank: where its example stands, read without stopping it.

When an example hangs, the rank's thread that runs it is blocked (usually
in C++, inside a collective, with the GIL released), so it can't answer for
itself.  A *snapshot* is taken from another thread of the same process
instead: the rank's watch thread (``local.py``) or its heartbeat thread
(``torchrun.py``).  It holds

* the collectives this example issued, from torch's flight recorder: per
  process group, in order, each with its op, shapes, dtypes and whether it
  completed (``retired``).  torch keeps that record itself; fuzzdist only
  switches it on (``TORCH_FR_BUFFER_SIZE``, see :func:`enable_flight_recorder`)
  and asks the installed torch, once per rank, whether its recorder covers the
  pool's backend (:func:`recorder_gap`: where it doesn't, the collectives are
  unknown, never "none");
* where the example's thread is now: the ``torch.distributed`` call it waits
  in with its root or peer (read from that call's frame), and the innermost
  frame of the user's own code, which gives a hang its identity;
* the Works still pending in objects that say so (:class:`PendingWorkSource`,
  implemented by :class:`~fuzzdist.toolkit.reorder.ReorderingProcessGroup`);
* on request, the example thread's stack from the rank function down, and
  the other threads that are not fuzzdist's own plumbing;
* whether a loop is spinning: the innermost frame when it was caught at a
  loop's backward jump (:attr:`RankState.spinning`), and the example
  thread's CPU time, so that readings taken one after another tell a loop
  that doesn't end from a slow example that progresses.

A snapshot comes in two weights.  Reading the flight recorder means torch
writing its whole ring buffer as JSON and this process parsing it: up to
:data:`FLIGHT_RECORDER_ENTRIES` records, most of them earlier examples'
(hundreds of milliseconds on a loaded machine).  A *light* snapshot
(``records=False``) skips it and reads instead the process groups' own
counters of collectives issued and completed (:attr:`RankState.unfinished_ops`,
microseconds): the driver's probes read light first and read the records only
from ranks that could be in a deadlock (``controller.py``).

The driver turns the snapshots of all ranks into an explanation
(:mod:`fuzzdist.pool.hangs`).  Everything here is read-only and bounded; a
snapshot never raises (a part that can't be read is left empty).
"""

from __future__ import annotations

import dis
import json
import linecache
import os
import sys
import sysconfig
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol, TypeVar, runtime_checkable

# Records kept per process by torch's flight recorder when fuzzdist switches it on (it is off by
# default in torch).  Enough for a few examples' collectives; older records are overwritten.
FLIGHT_RECORDER_ENTRIES = 2000

_C10D_FILE = os.path.join("torch", "distributed", "distributed_c10d.py")
# fuzzdist/pool (this file is in fuzzdist/pool/rank): plumbing, never the user's code
_POOL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FUZZDIST_DIR = os.path.dirname(_POOL_DIR)
_PROPERTIES_DIR = os.path.join(_FUZZDIST_DIR, "properties")  # fuzzdist's own properties are user code
_T = TypeVar("_T")
_TORCH_DIR = os.sep + "torch" + os.sep
_STDLIB_DIRS = tuple({sysconfig.get_paths()["stdlib"], os.path.dirname(threading.__file__)})
# Arguments of a torch.distributed call that say who it waits for.
_PEER_ARGS = ("src", "dst", "group_src", "group_dst", "peer", "tag")
# A thread running a loop is caught by another thread's read where the interpreter checks whether to
# hand over the GIL: at the loop's jump back (3.11+; JUMP_ABSOLUTE before), never at a call, where a
# thread waiting in a C function (a sleep, a collective, a long torch op) stands.
_LOOP_OPCODES = frozenset(dis.opmap[name] for name in dis.opmap if "BACKWARD" in name or name == "JUMP_ABSOLUTE")


@runtime_checkable
class PendingWorkSource(Protocol):
    """An object holding Works it can describe while they are pending (a ProcessGroup, a scheduler).

    Register one with :func:`watch_pending`; when an example hangs its lines
    are shown under the rank that holds it.
    """

    def fuzzdist_pending_works(self) -> list[str]:
        """One line per Work still pending: which one, which op, and what it waits for."""
        ...


@dataclass(frozen=True)
class Collective:
    """One collective or point-to-point op this example issued on this rank (a flight-recorder record)."""

    group: str  # the process group's name ("0" is the default group)
    group_desc: str
    group_ranks: tuple[int, ...] | None  # the group's global ranks, where the recorder says
    step: int  # 1-based position among this example's ops on that group (collectives and p2p apart)
    op: str  # "all_reduce", "broadcast", "send", ...
    p2p: bool
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    done: bool

    def describe(self) -> str:
        """'all_reduce #3 (float32[4])'."""
        tensors = ", ".join(f"{d}{list(s)}" for d, s in zip(self.dtypes, self.shapes, strict=False))
        where = "" if self.group == "0" else f" on group {self.group_desc or self.group}"
        kind = "p2p " if self.p2p else ""
        return f"{self.op} {kind}#{self.step}{where} ({tensors})"

    def signature(self) -> tuple[Any, ...]:
        """What two ranks' records at the same step must agree on."""
        return (self.op, self.shapes, self.dtypes)


@dataclass(frozen=True)
class Site:
    """A frame: file, line, function, and the source line's text."""

    filename: str
    lineno: int
    function: str
    text: str = ""

    def describe(self) -> str:
        return f"{self.function} at {os.path.basename(self.filename)}:{self.lineno}"


@dataclass(frozen=True)
class RankState:
    """One rank's snapshot in example ``seq``, while it runs it or once it finished (see the module docstring)."""

    rank: int
    seq: int  # the example this describes (the one asked about, unless the rank never started it)
    finished: bool  # the rank is done with the example (answered); only its collectives are of interest
    elapsed: float  # seconds since the example started on this rank
    collectives: tuple[Collective, ...] | None  # None: unknown, the flight recorder can't say (``unrecorded``)
    call: str | None  # the torch.distributed function the example's thread is inside, if any
    call_args: tuple[tuple[str, str], ...] = ()  # its root/peer arguments, e.g. (("src", "0"),)
    user_site: Site | None = None  # innermost frame of the user's code
    pending_works: tuple[str, ...] = ()
    stack: str = ""  # the example thread's stack from the rank function down (when asked for)
    threads: str = ""  # stacks of the other threads that are not fuzzdist's own (when asked for)
    note: str = ""  # what could not be read, if anything
    unrecorded: str = ""  # why ``collectives`` is None: what the flight recorder does not cover here
    records_read: bool = True  # False in a light snapshot: ``collectives`` was not read (None)
    # Whether a collective issued on this rank has not completed, by its process groups' own counters
    # (torch's pg_status: collectives, not p2p ops); None where they can't say.
    unfinished_ops: bool | None = None
    spinning: Site | None = None  # the innermost frame, where it was caught at a loop's jump back
    cpu: float | None = None  # the example thread's CPU seconds so far, where the platform tells

    def may_deadlock(self) -> bool:
        """Could this rank be part of a certain deadlock (which needs a collective in flight)?  A light
        snapshot's answer: False only where the process groups' counters show nothing in flight and the
        rank is inside no torch.distributed call."""
        if self.finished:
            return False
        if self.records_read:
            return bool(self.in_flight())
        return self.unfinished_ops is not False or self.call is not None

    def in_flight(self) -> tuple[Collective, ...]:
        """The collectives issued and not completed."""
        return tuple(c for c in self.collectives or () if not c.done)

    def progress(self) -> tuple[Any, ...]:
        """What changes while the rank makes progress: two equal values mean it stood still."""
        return (
            self.seq,
            self.finished,
            self.collectives,
            self.call,
            self.call_args,
            self.user_site,
            self.pending_works,
        )


# -- bookkeeping done by the example's thread (cheap: two attribute writes) ------------


class _Current:
    seq = 0
    last = 0  # the example this rank last started: its record stays readable once it finished
    thread: int | None = None
    start_ns = 0  # wall clock, as the flight recorder's time_created_ns
    start = 0.0  # monotonic
    rank = 0


_current = _Current()
_sources: weakref.WeakSet[Any] = weakref.WeakSet()


def begin_example(rank: int, seq: int) -> None:
    """Called by the thread about to run example ``seq``: snapshots look at this thread from now on."""
    _current.rank = rank
    _current.thread = threading.get_ident()
    _current.start_ns = time.time_ns()
    _current.start = time.monotonic()
    _current.seq = _current.last = seq


def end_example() -> None:
    _current.seq = 0


def watch_pending(source: PendingWorkSource) -> None:
    """Have hangs name ``source``'s pending Works (held weakly: it goes when the source does)."""
    _sources.add(source)


def enable_flight_recorder(backend: str) -> None:
    """Switch torch's flight recorder on for process groups created from now on, unless the user chose,
    and find out whether it records ``backend``'s collectives (the pool's backend, read by snapshots).

    ``TORCH_FR_BUFFER_SIZE`` set in the environment (0 switches it off) wins.
    """
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(FLIGHT_RECORDER_ENTRIES))
    _recorder.gap = recorder_gap(backend)


class _Recorder:
    gap = ""  # why this rank's flight recorder can't give its collectives ("": it can)


_recorder = _Recorder()
_gaps: dict[str, str] = {}


def recorder_gap(backend: str) -> str:
    """Why torch's flight recorder can't give this process's ``backend`` collectives; "" where it can.

    Asked of the installed torch, not read from its version: the recorder may be
    switched off (``TORCH_FR_BUFFER_SIZE``), absent, or NCCL's only (gloo's
    collectives then leave no record).  For gloo the answer is tried: one
    all_reduce on a private one-rank gloo group over loopback (milliseconds,
    nothing leaves the process), then a look for its record.  Other backends
    are taken as recorded wherever a recorder exists (NCCL's is torch's
    oldest).  Once per process and backend.
    """
    size = os.environ.get("TORCH_FR_BUFFER_SIZE", "0") or "0"
    if not size.strip().lstrip("-").isdigit() or int(size) <= 0:
        return f"torch's flight recorder is off: TORCH_FR_BUFFER_SIZE={size}"
    if backend not in _gaps:
        _gaps[backend] = _probe_recorder(backend)
    return _gaps[backend]


def _dumps(records: bool = True) -> list[dict[str, Any]]:
    """Every flight recorder's dump this torch has: gloo's and other backends', and NCCL's where it is built.

    Without ``records`` only the process groups' configuration and counters (``pg_config``,
    ``pg_status``): microseconds, where the records cost milliseconds per thousand.
    """
    import torch._C._distributed_c10d as c10d

    dumps = []
    for dumper in ("_dump_fr_trace_json", "_dump_nccl_trace_json"):
        dump = getattr(c10d, dumper, None)
        if dump is not None:
            dumps.append(json.loads(dump(includeCollectives=records, onlyActive=False)))
    return dumps


def _unfinished_ops() -> bool | None:
    """Whether a collective issued by this process has not completed, from every process group's counters
    (``last_enqueued_collective`` against ``last_completed_collective``); None where no group reports them."""
    statuses = [status for data in _dumps(records=False) for status in (data.get("pg_status") or {}).values()]
    counts = [
        (int(s["last_enqueued_collective"]), int(s["last_completed_collective"]))
        for s in statuses
        if isinstance(s, dict) and {"last_enqueued_collective", "last_completed_collective"} <= s.keys()
    ]
    if not counts:
        return None
    return any(enqueued > completed for enqueued, completed in counts)


def _probe_recorder(backend: str) -> str:
    import torch

    try:
        import torch._C._distributed_c10d as c10d

        if not any(hasattr(c10d, d) for d in ("_dump_fr_trace_json", "_dump_nccl_trace_json")):
            return f"torch {torch.__version__} has no flight recorder to read"
        if backend != "gloo":
            return ""
        import torch.distributed as dist

        since = time.time_ns()
        gloo: Any = dist.ProcessGroupGloo  # its options and ops are not in torch's type stubs
        options = gloo._Options()
        options._devices = [gloo.create_device(hostname="127.0.0.1")]
        group = gloo(dist.HashStore(), 0, 1, options)
        group.allreduce([torch.zeros(1)]).wait()
        del group
        if any(
            e.get("time_created_ns", 0) >= since and "all_reduce" in str(e.get("profiling_name"))
            for d in _dumps()
            for e in d.get("entries", ())
        ):
            return ""
        return f"torch {torch.__version__}'s flight recorder keeps no record of gloo's collectives"
    except Exception as exc:  # noqa: BLE001 - a rank that can't ask still runs; its hangs say why
        return f"whether torch's flight recorder covers {backend} could not be asked ({type(exc).__name__}: {exc})"


# -- the snapshot, taken from another thread -----------------------------------------


def snapshot(seq: int, with_stack: bool = False, records: bool = True) -> RankState:
    """This rank's state in example ``seq`` (its state between examples if ``seq`` is over).

    ``records=False``: a light snapshot, the flight recorder's records left unread (the module docstring).
    """
    running = _current.seq == seq
    notes: list[str] = []
    frames: list[FrameType] = []
    if running and _current.thread is not None:
        frame = sys._current_frames().get(_current.thread)
        frames = _example_frames(frame)
    no_call: tuple[str | None, tuple[tuple[str, str], ...]] = (None, ())
    call, call_args = _safely(lambda: _torch_call(frames), no_call, "the torch.distributed call", notes)
    collectives: tuple[Collective, ...] | None = None
    unfinished = None
    try:
        # A rank that finished example seq starts no collective before the next example: its record
        # since seq began is still exactly seq's.
        if not records:
            unfinished = None if _recorder.gap else _unfinished_ops()
        elif not _recorder.gap:
            collectives = _collectives(_current.start_ns) if _current.last == seq else ()
    except Exception as exc:  # noqa: BLE001 - a snapshot never raises
        notes.append(f"flight recorder unreadable ({type(exc).__name__}: {exc})")
    pending: list[str] = []
    for source in list(_sources):
        try:
            pending.extend(source.fuzzdist_pending_works())
        except Exception as exc:  # noqa: BLE001
            notes.append(f"{type(source).__name__}.fuzzdist_pending_works raised {type(exc).__name__}: {exc}")
    return RankState(
        rank=_current.rank,
        seq=seq if _current.last == seq else _current.last,
        finished=not running,
        elapsed=time.monotonic() - _current.start,
        collectives=collectives,
        call=call,
        call_args=call_args,
        user_site=_safely(lambda: _user_site(frames), None, "the example's own line", notes),
        pending_works=tuple(pending),
        stack=_safely(lambda: _format(frames), "", "the stack", notes) if with_stack else "",
        threads=_safely(_other_threads, "", "the other threads", notes) if with_stack else "",
        note="; ".join(notes),
        unrecorded=_recorder.gap,
        records_read=records,
        unfinished_ops=unfinished,
        spinning=_safely(lambda: _spinning(frames), None, "the innermost frame", notes),
        cpu=_thread_cpu(_current.thread) if running else None,
    )


def _safely(read: Callable[[], _T], default: _T, what: str, notes: list[str]) -> _T:
    """``read()``, or ``default`` with a note where it raised: the example's frames change under a snapshot
    taken from another thread, and a user's object in them may fail its repr."""
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 - a snapshot never raises
        notes.append(f"{what} unreadable ({type(exc).__name__}: {exc})")
        return default


def _collectives(since_ns: int) -> tuple[Collective, ...]:
    """This example's flight-recorder records, numbered per group."""
    entries = []
    groups: dict[str, Any] = {}
    for data in _dumps():
        entries.extend(data.get("entries", ()))
        groups.update(data.get("pg_config") or {})
    steps: dict[tuple[str, bool], int] = {}
    out = []
    for entry in sorted(entries, key=lambda e: e.get("time_created_ns", 0)):
        if entry.get("time_created_ns", 0) < since_ns:
            continue
        name, desc = (list(entry.get("process_group") or ("?", "")) + ["", ""])[:2]
        p2p = bool(entry.get("is_p2p"))
        steps[(name, p2p)] = step = steps.get((name, p2p), 0) + 1
        op = str(entry.get("profiling_name", "?")).split(":", 1)[-1]
        out.append(
            Collective(
                group=str(name),
                group_desc=str(desc),
                group_ranks=_group_ranks(groups, str(name)),
                step=step,
                op=op,
                p2p=p2p,
                shapes=tuple(tuple(s) for s in entry.get("input_sizes", ())),
                dtypes=tuple(_dtype_name(d) for d in entry.get("input_dtypes", ())),
                done=bool(entry.get("retired")) or entry.get("state") == "completed",
            )
        )
    return tuple(out)


def _group_ranks(groups: dict[str, Any], name: str) -> tuple[int, ...] | None:
    config = groups.get(name)
    if not isinstance(config, dict):
        return None
    try:
        return tuple(int(r) for r in json.loads(str(config.get("ranks"))))
    except (ValueError, TypeError):
        return None


def _dtype_name(fr_name: str) -> str:
    # The recorder names dtypes as c10's ScalarType does ("Float", "Long"): say them as torch does.
    return {
        "Float": "float32",
        "Double": "float64",
        "Half": "float16",
        "BFloat16": "bfloat16",
        "Long": "int64",
        "Int": "int32",
        "Short": "int16",
        "Char": "int8",
        "Byte": "uint8",
        "Bool": "bool",
        "ComplexFloat": "complex64",
        "ComplexDouble": "complex128",
    }.get(fr_name, fr_name)


def _example_frames(frame: FrameType | None) -> list[FrameType]:
    """The example thread's frames, outermost first, from the rank function down (pool plumbing dropped)."""
    chain = []
    while frame is not None:
        chain.append(frame)
        frame = frame.f_back
    chain.reverse()
    for i, f in enumerate(chain):  # the rank function is the first frame below the pool's plumbing
        if (
            not f.f_code.co_filename.startswith(_POOL_DIR)
            and i
            and chain[i - 1].f_code.co_filename.startswith(_POOL_DIR)
        ):
            return chain[i:]
    return chain


def _torch_call(frames: list[FrameType]) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """The outermost torch.distributed function the thread is in (what the user called), and its peer args."""
    for f in frames:
        if f.f_code.co_filename.endswith(_C10D_FILE) and not f.f_code.co_name.startswith("_"):
            args = []
            params = f.f_code.co_varnames[: f.f_code.co_argcount + f.f_code.co_kwonlyargcount]
            for name in _PEER_ARGS:
                value = f.f_locals.get(name)
                if value is not None and name in params:
                    args.append((name, repr(value)))
            given = {k for k, _ in args}  # torch fills group_src from src: show what the caller gave
            args = [(k, v) for k, v in args if not (k.startswith("group_") and k[6:] in given)]
            return f.f_code.co_name, tuple(args)
    import torch.distributed as dist

    for f in frames:  # a Work implemented in Python: its wait() is a frame of its own
        if f.f_code.co_name == "wait" and isinstance(f.f_locals.get("self"), dist.Work):
            return f"{type(f.f_locals['self']).__name__}.wait", ()
    return None, ()


def _user_site(frames: list[FrameType]) -> Site | None:
    """The innermost frame that is neither torch's, the standard library's nor fuzzdist's plumbing."""
    for f in reversed(frames):
        name = f.f_code.co_filename
        if _TORCH_DIR in name or name.startswith("<") or _is_stdlib(name):
            continue
        if name.startswith(_FUZZDIST_DIR) and not name.startswith(_PROPERTIES_DIR):
            continue  # fuzzdist's library (a ReorderingProcessGroup's wait, say): the caller is the site
        return Site(name, f.f_lineno, f.f_code.co_name, linecache.getline(name, f.f_lineno).strip())
    return None


def _spinning(frames: list[FrameType]) -> Site | None:
    """The innermost frame's site if the thread was caught at a loop's jump back (see ``_LOOP_OPCODES``)."""
    if not frames:
        return None
    f = frames[-1]
    code = f.f_code.co_code
    if not 0 <= f.f_lasti < len(code) or code[f.f_lasti] not in _LOOP_OPCODES:
        return None
    name = f.f_code.co_filename
    return Site(name, f.f_lineno, f.f_code.co_name, linecache.getline(name, f.f_lineno).strip())


def _thread_cpu(ident: int | None) -> float | None:
    """The CPU seconds thread ``ident`` of this process has used, where the platform tells (Linux does)."""
    if ident is None or not hasattr(time, "pthread_getcpuclockid"):
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, OverflowError, ValueError):  # the thread is gone
        return None


def _is_stdlib(filename: str) -> bool:
    # site-packages may sit under the stdlib's directory (a Python without a venv): that is user code.
    return filename.startswith(_STDLIB_DIRS) and "-packages" + os.sep not in filename


def _format(frames: list[FrameType]) -> str:
    if not frames:
        return "(not running an example)"
    summary = traceback.StackSummary.extract(((f, f.f_lineno) for f in frames), capture_locals=False)
    return "".join(summary.format()).rstrip()


def _other_threads() -> str:
    """Stacks of the threads other than the example's, except fuzzdist's own (named ``fuzzdist-*``)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    parts = []
    for ident, frame in sys._current_frames().items():
        name = names.get(ident, f"thread {ident}")
        if ident in (me, _current.thread) or name.startswith("fuzzdist-"):
            continue  # the example's thread is shown on its own; fuzzdist's plumbing is noise
        stack = "".join(traceback.format_stack(frame)).rstrip()
        parts.append(f"thread {name!r}:\n{stack}")
    return "\n".join(parts)
