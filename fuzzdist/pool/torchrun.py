"""Transport 2: the processes torchrun started, talking through torchrun's store: fuzzing across nodes.

Under ``torchrun --nnodes N --nproc-per-node G -m fuzzdist run ...`` every
process joins torchrun's process group (:func:`join`).  Rank 0 drives
Hypothesis: its :class:`TorchrunPool` puts each example's message in
torchrun's store and runs it on rank 0 too, in a thread.  The other ranks
only execute (:func:`serve`), with the same
:class:`~fuzzdist.pool.rank.worker.Worker` as a spawned rank: same isolation,
seeding and failure capture.

Every wait is bounded.  A rank whose heartbeat stops is a
:class:`~fuzzdist.errors.RankCrash` in the running example, so Hypothesis
saves it.  So is a rank that dies and makes torchrun's agent SIGTERM the
group: on a SIGTERM during an example rank 0 first tells the dead ranks from
the signalled ones (:mod:`fuzzdist.pool.torchrun_stop`), holding back what
the other SIGTERM handlers do (``fuzzdist run``'s ends the campaign) until
the example is classified (:class:`fuzzdist.pool.signals.Hold`).  A job stopped
by a user or scheduler records no crash.  The pool's SIGTERM handler chains
to the one it replaced (:mod:`fuzzdist.pool.signals`), whichever was installed
first.  Unlike a spawned pool, this one can't restart its ranks: after a
crash or timeout it is spent, and the next ``run`` raises
:class:`~fuzzdist.errors.PoolGone`, a ``BaseException`` that ends the
campaign at once.  torchrun's ``--max-restarts`` then starts a fresh group,
whose first run replays the saved failures.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Set
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import timedelta
from typing import Any

from fuzzdist.errors import CapabilityError, ForgedMessage, InvalidState, PoolGone, RankCrash
from fuzzdist.pool import leftovers, line_coverage, messages, torchrun_auth
from fuzzdist.pool.controller import DEFAULT_TIMEOUT, Controller, Outcome, decode_reply
from fuzzdist.pool.rank import line_cover, rank_state
from fuzzdist.pool.rank.rank_state import RankState
from fuzzdist.pool.rank.worker import Worker, answer_snapshot, execute
from fuzzdist.pool.signals import ChainedHandler, Hold, held
from fuzzdist.pool.torchrun_stop import SigtermMark, Verdict, mark_key

# Keys live in torchrun's store, which outlives a restart of the group: one namespace per attempt, its
# prefix derived from the run's secret (join() sets it: torchrun_auth), so that nobody else can guess it.
_signer: torchrun_auth.Signer | None = None
_folder: leftovers.Owned | None = None  # this rank's folder (join() makes it), its lock held while it is used
_PREFIX = f"fuzzdist/unjoined/{torchrun_auth.scope()}/"
_STOP_KEY = f"{_PREFIX}stop"
HEARTBEAT_S = 0.5
LOST_AFTER_S = 10.0  # a rank whose heartbeat stood still this long is gone
FORGED_EXIT_CODE = 2  # a serving rank that read a message not signed with the run's secret
_WAIT_SLICE_S = 0.25  # store waits are cut in slices to look at heartbeats and signals


def in_torchrun() -> bool:
    """Is this process one of torchrun's workers?"""
    return "TORCHELASTIC_RUN_ID" in os.environ or all(
        k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")
    )


def join(backend: str = "gloo", device: str = "cpu", timeout: float = DEFAULT_TIMEOUT) -> tuple[Any, Any]:
    """Join torchrun's process group; return (RankContext, store) for this process."""
    import torch
    import torch.distributed as dist

    from fuzzdist.pool.capabilities.pool_args import validate_pool_args
    from fuzzdist.pool.rank.context import RankContext

    if not in_torchrun():
        raise InvalidState(
            "not started by torchrun: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and "
            "LOCAL_RANK are not all set. Run `torchrun ... -m fuzzdist run`."
        )
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    validate_pool_args(world_size, backend, device, timeout, local=False)  # torchrun's ranks exist already
    if device == "cuda":
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    secret = torchrun_auth.load_secret()
    use_signer(torchrun_auth.Signer(secret, torchrun_auth.scope()))
    rank_state.enable_flight_recorder(backend)
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout + 30.0))
    torchrun_auth.forget_node_secret()  # every rank read it before the group could form
    store = _store_client(timeout)
    # One secret on every rank, checked before anything runs: a rank with another one could not read
    # rank 0's messages (it would be lost, then saved as a crash of a property that passes).
    try:
        torchrun_auth.check_same_secret(store, rank, world_size, secret, timeout + 30.0)
    except InvalidState:
        dist.destroy_process_group()
        raise
    leftovers.remove_leftovers()  # what SIGKILLed runs left, this user's only
    global _folder
    _folder = leftovers.make_owned_dir(leftovers.TORCHRUN_DIR_PREFIX)  # owned until _remove_tmpdir
    leftovers.own_multiprocessing_temp_dir()  # where file_descriptor sharing goes: removed if this rank is SIGKILLed
    ctx = RankContext(rank, world_size, dev, backend, dist.group.WORLD, store, _folder.path)
    return ctx, store


def use_signer(signer: torchrun_auth.Signer) -> None:
    """Sign and check this process's store messages with ``signer``, under its key prefix (join() calls it)."""
    global _signer, _PREFIX, _STOP_KEY
    _signer, _PREFIX = signer, signer.prefix
    _STOP_KEY = f"{_PREFIX}stop"


def _seal(key: str, data: bytes) -> bytes:
    if _signer is None:
        raise InvalidState("fuzzdist.pool.torchrun: join() first (it sets up the signing of store messages)")
    return _signer.seal(key, data)


def _open(key: str, value: bytes) -> bytes:
    """The data at ``key``, its signature checked: ForgedMessage if someone else wrote it."""
    if _signer is None:
        raise InvalidState("fuzzdist.pool.torchrun: join() first (it sets up the signing of store messages)")
    return _signer.open(key, value)


def _load(key: str, value: bytes) -> messages.Message:
    """The message at ``key``, unpickled only once its signature checks."""
    return messages.load(_open(key, value))


def serve(ctx: Any, store: Any) -> int:
    """Execute the examples rank 0 sends until it says stop (return 0) or goes away (return 3)."""
    heart = _Heartbeat(ctx.rank, watch_rank0=True)
    heart.start()
    sigterm = None
    if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
        sigterm = SigtermMark(_store_client(30.0), mark_key(_PREFIX, ctx.rank))  # tells rank 0 "stopped, not dead"
    try:
        return Worker(ctx).serve(_StoreChannel(store, ctx.rank, heart))
    except ForgedMessage as exc:  # someone else wrote to the store: say so and leave, having run nothing of it
        print(f"fuzzdist rank {ctx.rank}: {exc}", file=sys.stderr, flush=True)
        return FORGED_EXIT_CODE
    finally:
        heart.stop()
        if sigterm is not None:
            sigterm.remove()
        _remove_tmpdir(ctx)


class _StoreChannel:
    """A serving rank's end of the store (a :class:`~fuzzdist.pool.rank.worker.Channel`).

    Example ``seq``'s call is the key ``call/<seq>``; this rank's reply goes
    to ``result/<seq>/<rank>``; ``stop`` holds a stop message once rank 0 closes.
    """

    lost_exit_code = 3  # the driver is gone: torchrun's agent decides what happens next

    def __init__(self, store: Any, rank: int, heart: _Heartbeat) -> None:
        self._store, self._rank, self._heart = store, rank, heart
        self._seq = 0

    def receive(self) -> messages.Message | None:
        """The next call or the stop, unpickled only if signed with the run's secret (ForgedMessage if not)."""
        self._seq += 1
        key = f"{_PREFIX}call/{self._seq}"
        while not _wait(self._store, key, _WAIT_SLICE_S):
            if self._store.check([_STOP_KEY]):
                return _load(_STOP_KEY, self._store.get(_STOP_KEY))
            if self._heart.rank0_lost():
                return None
        return _load(key, self._store.get(key))

    def send(self, data: bytes) -> bool:
        key = f"{_PREFIX}result/{self._seq}/{self._rank}"
        self._store.set(key, _seal(key, data))
        return True


class TorchrunPool(Controller):
    """Rank 0's side of a torchrun-formed pool: the same ``run`` as :class:`~fuzzdist.RankPool`.

    It can't restart torchrun's processes: after a crash or a hang it is
    spent, and its next ``run`` raises :class:`~fuzzdist.errors.PoolGone`.
    """

    aftermath = (
        "the torchrun group is spent: the next run raises PoolGone; start torchrun with "
        "--max-restarts to get a fresh group, which replays this failure first"
    )

    def __init__(
        self, ctx: Any, store: Any, timeout: float = DEFAULT_TIMEOUT, straggler_grace: float | None = None
    ) -> None:
        if ctx.rank != 0:
            raise InvalidState("TorchrunPool drives from rank 0; other ranks call fuzzdist.pool.torchrun.serve()")
        super().__init__(ctx.world_size, ctx.backend, ctx.device.type, timeout, straggler_grace)
        self.generation = 1
        self._ctx, self._store = ctx, store
        self._heart = _Heartbeat(0, watch_rank0=False, watch_ranks=range(1, ctx.world_size))
        self._heart.start()
        self._gone: BaseException | None = None  # the failure that spent the pool
        self._local: Future[Any] | None = None  # rank 0's share of the running example
        self._requests = 0  # snapshot requests sent
        self._stopping = False
        self._judged = 0  # the example whose ranks were judged after the SIGTERM
        self._in_flight = False  # inside run()
        # In the main thread run() holds SIGTERM's effects (a Hold) until the example is classified.  Elsewhere
        # the pool ends the work itself (a RankCrash or PoolGone) instead of SIG_DFL ending it mid-example.
        self._sigterm = ChainedHandler(
            signal.SIGTERM, self._on_sigterm, ends_process=lambda: self._in_flight and not held(signal.SIGTERM)
        )

    @property
    def stopping(self) -> bool:
        """A SIGTERM arrived: the group is being stopped, or torchrun's agent stops it because a rank died."""
        return self._stopping

    def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> list[Any]:
        """:meth:`Controller.run <fuzzdist.pool.controller.Controller.run>`; a SIGTERM during it is classified.

        If a rank died (torchrun's agent then SIGTERMs the group), the example
        is a ``RankCrash`` of the dead ranks: what the other SIGTERM handlers
        raise (``fuzzdist run``'s ``Terminated``) is raised by the next run, and
        SIG_DFL's end of the process is not done (the next run raises
        ``PoolGone``).  If none died (the job is being stopped), what they raise
        or owe happens at once; if nothing, this run raises ``PoolGone``.
        """
        self._in_flight = True
        try:
            with Hold(signal.SIGTERM):
                try:
                    return super().run(fn, *args, **kwargs)
                except _GroupStopped as stopped:
                    self._gone = stopped
            raise PoolGone(self._gone)  # nothing else ends the work: the pool is spent
        finally:
            self._in_flight = False

    def close(self) -> None:
        """Tell the other ranks to stop; they leave the group and exit 0."""
        try:
            self._store.set(_STOP_KEY, _seal(_STOP_KEY, messages.stop()))
        except Exception:  # noqa: BLE001 - the store may be gone already: stopping is best effort
            pass
        self._heart.stop()
        self._sigterm.remove()
        _remove_tmpdir(self._ctx)

    # -- the transport: moving one example's bytes ------------------------------------

    def _check_usable(self) -> None:
        if self._gone:
            raise PoolGone(self._gone)

    def _send(self, seq: int, seed: int, payload: bytes, message: bytes) -> None:
        key = f"{_PREFIX}call/{seq}"
        self._store.set(key, _seal(key, message))
        line_cover.request(line_coverage.scope_field())  # --cover: rank 0 runs its share here, not in a Worker
        self._local = _in_daemon_thread(execute, self._ctx, seq, seed, payload)

    def _receive(self, out: Outcome, seconds: float) -> bool:
        if self._stopping and self._judged != out.seq:
            self._judged = out.seq
            return self._judge(out)
        self._take(out, seconds)
        for r in self._heart.lost():
            if r in out.pending:
                out.died(r)
        return True

    def _judge(self, out: Outcome) -> bool:
        """After a SIGTERM: the ranks that died (no SIGTERM mark, no heartbeat) within VERDICT_S are the
        example's crash; if none died and some never answered, the group is being stopped."""
        verdict = Verdict(self._store, _PREFIX, out.pending - {0}, lambda r: self._store.add(_alive_key(r), 0))
        dead = verdict.wait(lambda: out.pending - {0}, lambda seconds: self._take(out, seconds))
        for r in dead:
            out.died(r)
        if out.pending and not dead:
            raise _GroupStopped()
        return not dead

    def _take(self, out: Outcome, seconds: float) -> None:
        """File the replies that arrive within ``seconds``."""
        if 0 in out.pending:
            assert self._local is not None
            try:
                reply = self._local.result(timeout=0 if len(out.pending) > 1 else _WAIT_SLICE_S)
            except FutureTimeout:
                pass
            else:
                out.take(0, decode_reply(reply, 0, out.seq))
        others = [r for r in out.pending if r != 0]
        if others:
            keys = [f"{_PREFIX}result/{out.seq}/{r}" for r in others]
            _wait(self._store, keys, min(_WAIT_SLICE_S, max(0.001, seconds)))
            for r, key in zip(others, keys, strict=True):
                if self._store.check([key]):
                    out.take(r, decode_reply(_reply(key, self._store.get(key), out.seq), r, out.seq))
                    self._store.delete_key(key)

    def _crash(self, dead: Set[int]) -> RankCrash:
        return RankCrash(
            sorted(dead),
            {r: -signal.SIGKILL for r in dead},
            {
                r: "(rank lost under torchrun: its heartbeat stopped, or it had died when "
                "torchrun's agent stopped the group; its exit code is in torchrun's log)"
                for r in dead
            },
            self.aftermath,
        )

    def _recover(self, failure: BaseException) -> None:
        self._gone = failure  # torchrun's processes can't be replaced from here: the pool is spent

    def _snapshots(
        self, seq: int, ranks: Set[int], with_stack: bool, records: bool = True
    ) -> dict[int, RankState | None]:
        states: dict[int, RankState | None] = dict.fromkeys(ranks)
        if 0 in ranks:  # rank 0's example runs in a thread of this process
            states[0] = rank_state.snapshot(seq, with_stack, records)
        others = [r for r in ranks if r != 0]
        if others:
            self._requests += 1
            request = self._requests
            # Answered by each rank's heartbeat thread (its main thread may be stuck in the example).
            key = f"{_PREFIX}snapshot"
            self._store.set(key, _seal(key, messages.snapshot(request, seq, with_stack, records)))
            deadline = time.monotonic() + 2 * HEARTBEAT_S + 1.0
            for r in others:
                key = f"{_PREFIX}state/{request}/{r}"
                if _wait(self._store, key, max(0.01, deadline - time.monotonic())):
                    try:
                        states[r] = _load(key, self._store.get(key))[1]["state"]
                    except Exception:  # noqa: BLE001 - an unreadable (or forged) answer is no answer
                        pass
                    self._store.delete_key(key)
        return states

    def _stacks(self, seq: int, ranks: Set[int]) -> dict[int, str]:
        # Only rank 0's own stack can be read without its heartbeat thread, which did not answer.
        return {
            r: _own_stack() if r == 0 else "(the rank did not answer: its heartbeat thread is stuck too)" for r in ranks
        }

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        # The example in flight is classified by _judge (torchrun's agent stops every worker when one dies).
        self._stopping = True


class _GroupStopped(BaseException):
    """SIGTERM during an example and no rank died: the job is being stopped (not a failure to save)."""

    def __init__(self) -> None:
        super().__init__(
            "SIGTERM: the torchrun group is being stopped (every rank that did not answer "
            "received the SIGTERM too or is alive; none died)"
        )


class TorchrunPoolCache:
    """The plugin's pool cache under torchrun: the one pool torchrun formed, for every property it fits."""

    def __init__(self, pool: TorchrunPool) -> None:
        self.pool = pool

    def get(self, key: Any) -> TorchrunPool:
        if key.world_size != self.pool.world_size or key.device != self.pool.device or key.backend != self.pool.backend:
            raise CapabilityError(
                f"under torchrun the pool is torchrun's {self.pool.world_size} {self.pool.device} processes "
                f"over {self.pool.backend}; this property asks for {key}. Pass --world-size "
                f"{self.pool.world_size} or start torchrun with --nproc-per-node {key.world_size}."
            )
        return self.pool

    def close(self) -> None:
        self.pool.close()


class _Heartbeat:
    """A thread that beats for this rank, watches the others' beats and answers snapshot requests."""

    def __init__(self, rank: int, watch_rank0: bool, watch_ranks: Iterable[int] = ()) -> None:
        self.rank = rank
        self._watch = [0] if watch_rank0 else list(watch_ranks)
        self._seen = {r: (-1, time.monotonic()) for r in self._watch}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._answered = b""  # the last snapshot request answered
        self._refused = False  # a forged snapshot request was reported
        self._thread = threading.Thread(target=self._loop, name="fuzzdist-heartbeat", daemon=True)

    def start(self) -> None:
        self._store = _store_client(30.0)  # its own connection: the main thread's may be blocked
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def lost(self) -> list[int]:
        now = time.monotonic()
        with self._lock:
            return [r for r, (_, since) in self._seen.items() if now - since > LOST_AFTER_S]

    def rank0_lost(self) -> bool:
        return 0 in self.lost()

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._store.add(_alive_key(self.rank), 1)
                for r in self._watch:
                    beats = self._store.add(_alive_key(r), 0)
                    with self._lock:
                        if beats != self._seen[r][0]:
                            self._seen[r] = (beats, time.monotonic())
                if self.rank != 0 and self._store.check([f"{_PREFIX}snapshot"]):
                    request = self._store.get(f"{_PREFIX}snapshot")
                    if request != self._answered:
                        self._answered = request
                        self._answer(request)
            except Exception:  # noqa: BLE001 - the store went away: the job is ending
                return

    def _answer(self, request: bytes) -> None:
        """Answer a snapshot request; a forged one is refused (said once on stderr) and the beat goes on."""
        try:
            _, fields = _load(f"{_PREFIX}snapshot", request)
        except ForgedMessage as exc:
            if not self._refused:
                self._refused = True
                print(f"fuzzdist rank {self.rank}: {exc}", file=sys.stderr, flush=True)
            return
        key = f"{_PREFIX}state/{fields['request']}/{self.rank}"
        self._store.set(key, _seal(key, answer_snapshot(**fields)))


def _reply(key: str, value: bytes, seq: int) -> bytes:
    """A rank's reply at ``key`` if signed with the run's secret; else an error reply saying it was refused
    (the example fails with that message, nothing forged is unpickled)."""
    try:
        return _open(key, value)
    except ForgedMessage as exc:
        from fuzzdist.pool import remote

        return messages.err(seq, remote.capture(exc), [])


def _remove_tmpdir(ctx: Any) -> None:
    """The rank's own folder (``ctx.tmpdir``, from join()) goes when the rank is done with the group."""
    tmpdir = getattr(ctx, "tmpdir", None)
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)
    if _folder is not None and _folder.path == tmpdir:
        _folder.release()  # after: a cleaner that takes the lock finds nothing left


def _alive_key(rank: int) -> str:
    """The counter ``rank``'s heartbeat thread adds to."""
    return f"{_PREFIX}alive/{rank}"


def _store_client(timeout: float) -> Any:
    import torch.distributed as dist

    return dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=timeout),
        wait_for_workers=False,
    )


def _wait(store: Any, keys: str | list[str], seconds: float) -> bool:
    """True once every key exists, False after ``seconds`` (never blocks longer).

    Polls ``check`` with a short backoff rather than a timed ``store.wait``:
    c10d logs a warning for every timed-out wait, and idle ranks wait a lot.
    """
    keys = [keys] if isinstance(keys, str) else keys
    deadline = time.monotonic() + seconds
    pause = 0.0001
    while True:
        try:
            if store.check(keys):
                return True
        except Exception:  # noqa: BLE001 - the store went away: the job is ending
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, 0.02)


def _in_daemon_thread(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """Run rank 0's share of an example in a daemon thread: if it hangs, the driver still
    answers (RankTimeout) and the process can still exit."""
    future: Future[Any] = Future()

    def target() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - execute() captures fn's own errors already
            future.set_exception(exc)

    threading.Thread(target=target, name="fuzzdist-rank0", daemon=True).start()
    return future


def _own_stack() -> str:
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        return f.read()
