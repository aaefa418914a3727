"""The standalone reproducer: what a script from ``fuzzdist replay --export-script`` runs, with torch alone.

An exported script is this module's source (read with the standard library's ``getsource`` by
:mod:`fuzzdist.campaign.export_script`) followed by one stored failure as a :class:`Reproducer`.
So this module imports nothing but the standard library and torch (numpy where it is installed):
the script runs under any torch build without pytest, Hypothesis or fuzzdist.  The two fuzzdist
names it imports, :class:`~fuzzdist.pool.rank.context.RankContext` and
:func:`~fuzzdist.errors.describe_exit`, are themselves torch-only; the exporter replaces each of
those imports with the named object's own source.

What must match the rank pool is the pool's own code, not a copy: every rank seeds each example
with :func:`seed_everything` (:mod:`fuzzdist.pool.rank.isolation` imports it from here), and the
rank function gets a real ``RankContext``.

The script spawns fresh ranks (``multiprocessing``, a TCPStore bound to the loopback interface),
runs the example's rank calls in order, each seeded as the pool seeds it, and compares the last
call with the stored failure: exit 1 (BUG) while it fails that way, 0 (FIXED) once it doesn't,
125 (NO VERDICT, ``git bisect run``'s "skip") when it can't tell.
"""

from __future__ import annotations

import base64
import multiprocessing as mp
import pickle
import queue
import random
import re
import shutil
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

from fuzzdist.errors import describe_exit
from fuzzdist.pool.rank.context import RankContext

try:
    import numpy as _np
except ImportError:  # numpy is optional inside torch
    _np = None  # type: ignore[assignment]

EXIT_FIXED, EXIT_BUG, EXIT_NO_VERDICT = 0, 1, 125
LOOPBACK = "127.0.0.1"


def seed_everything(seed: int, cuda: bool = False) -> None:
    """Seed random, numpy and torch (CPU, and every GPU on a CUDA rank): how every example is seeded.

    Not ``torch.manual_seed``: it also seeds every accelerator backend torch
    knows, which costs ~160us an example on a CPU rank.
    """
    random.seed(seed)
    torch.default_generator.manual_seed(seed)
    if cuda:
        torch.cuda.manual_seed_all(seed)
    if _np is not None:
        _np.random.seed(seed % 2**32)


@dataclass(frozen=True)
class Reproducer:
    """One stored failure, as the exported script holds it.

    ``calls``: the example's rank calls in order, each the base64 of the pickled ``(fn, args, kwargs)``
    (in chunks, joined before decoding) and the seed the pool derived from it.  ``failed``: how the last
    call failed (``kind``: raised, hang, crash or results; ``summary``; the exception ``types`` by rank;
    the rejected ``results``, pickled, in base64 chunks).
    """

    nodeid: str
    world_size: int
    backend: str
    device: str  # "cpu" or "cuda"
    timeout_s: float  # the pool's per-example timeout when the property failed
    paths: list[str]  # where the test's modules were imported from
    calls: list[tuple[tuple[str, ...], int]]
    failed: dict[str, Any]
    startup_s: float = 300.0  # a generous bound on the ranks' start-up: it is not part of the failure


# -- inside a rank ---------------------------------------------------------------------------


def rendezvous_store(rank: int, world_size: int, port: int, timeout_s: float, use_libuv: bool | None = None) -> Any:
    """The ranks' TCPStore on the loopback address; rank 0 serves it.

    torch's TCPStore server listens on every interface whatever host name it is given, and has no
    authentication.  Rank 0 binds a socket to the loopback address itself and hands it to the server
    (``master_listen_fd``), so the store can't be reached from another host.  A torch without that
    argument listens on every interface: the script says so on stderr.  ``use_libuv``: which of torch's
    two servers takes the socket (None: :func:`libuv_takes_a_socket` decides).
    """
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if rank != 0:
        return dist.TCPStore(LOOPBACK, port, world_size, False, timeout=timeout)
    if "master_listen_fd" not in (dist.TCPStore.__init__.__doc__ or ""):  # pybind's signature, in its docstring
        sys.stderr.write(
            f"note: this torch's TCPStore can't be bound to {LOOPBACK}: it listens on every "
            f"interface (port {port}) while the script runs\n"
        )
        return dist.TCPStore(LOOPBACK, port, world_size, True, timeout=timeout)
    if use_libuv is None:
        use_libuv = libuv_takes_a_socket(torch.__version__)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind((LOOPBACK, port))
        listener.listen()
        options: dict[str, Any] = {"timeout": timeout, "master_listen_fd": listener.fileno()}
        if "use_libuv" in (dist.TCPStore.__init__.__doc__ or ""):  # a torch before it has only the first server
            options["use_libuv"] = use_libuv
        store = dist.TCPStore(LOOPBACK, port, world_size, True, **options)
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store's server owns the socket now: Python must never close it under it
    return store


def libuv_takes_a_socket(version: str) -> bool:
    """Does this torch's libuv TCPStore server serve on a socket it is handed?  From the 2.8 release on.

    torch 2.8's release notes list it ("Supported masterListenFd in TCPStoreLibUvBackend": the server
    never called listen on it before); torch's first server takes one in every release that has the
    argument, so it serves there, and for a build whose version can't be read.  A 2.8 pre-release may
    predate the change: the first server too.
    """
    found = re.match(r"(\d+)\.(\d+)(?:\.\d+)?(.*)", version)
    if found is None:
        return False
    release, rest = (int(found[1]), int(found[2])), found[3]
    return release > (2, 8) or (release == (2, 8) and not rest.startswith(("a", "b", "rc", ".dev")))


def rank_main(repro: Reproducer, rank: int, port: int, tmpdir: str, replies: Any) -> None:
    """A spawned rank: join the group, run every call seeded, put each outcome on ``replies``."""
    sys.path[:0] = [p for p in repro.paths if p not in sys.path]
    import torch.distributed as dist

    store = rendezvous_store(rank, repro.world_size, port, repro.startup_s)
    dist.init_process_group(
        repro.backend,
        store=store,
        rank=rank,
        world_size=repro.world_size,
        timeout=timedelta(seconds=max(repro.timeout_s, 60.0)),
    )
    device = torch.device("cpu")
    if repro.device == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    ctx = RankContext(rank, repro.world_size, device, repro.backend, dist.group.WORLD, store, tmpdir)
    replies.put((rank, -1, "ready", None))
    for i, (payload, seed) in enumerate(repro.calls):
        ctx.seed, ctx.example = seed, i + 1
        try:
            fn, args, kwargs = pickle.loads(base64.b64decode("".join(payload)))
            seed_everything(seed, device.type == "cuda")
            result = fn(ctx, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            kind = type(exc)
            replies.put(
                (
                    rank,
                    i,
                    "raised",
                    (f"{kind.__module__}.{kind.__qualname__}", str(exc).strip()[:300], traceback.format_exc()),
                )
            )
            return
        try:
            data = pickle.dumps(result)
        except Exception as exc:  # noqa: BLE001 - the parent shows what it can
            data = pickle.dumps(f"unpicklable result: {exc}")
        replies.put((rank, i, "ok", data))
    dist.destroy_process_group()


# -- the verdict ------------------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Equal, bit for bit for tensors (NaNs included), element by element for containers."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        if not (torch.is_tensor(a) and torch.is_tensor(b)) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        a, b = a.detach().cpu().contiguous().reshape(-1), b.detach().cpu().contiguous().reshape(-1)
        if a.dtype.is_complex:
            a, b = torch.view_as_real(a).reshape(-1), torch.view_as_real(b).reshape(-1)
        return a.numel() == 0 or torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    try:
        return bool(a == b) or (a != a and b != b)  # NaN equals NaN here
    except Exception:  # noqa: BLE001 - an == that raises: compare what they print
        return repr(a) == repr(b)


def verdict(
    repro: Reproducer, replies: dict[int, tuple[str, Any]], dead: dict[int, str], hung: set[int]
) -> tuple[int, str]:
    """(exit code, line) for the last call, from what each rank did (``dead``: rank -> how it died)."""
    failed = repro.failed
    if failed["kind"] == "crash" and dead:
        died = ", ".join(f"rank {r} ({how})" for r, how in sorted(dead.items()))
        return EXIT_BUG, f"BUG: rank process died again: {died}"
    if failed["kind"] == "hang" and hung:
        return EXIT_BUG, (
            f"BUG: ranks {sorted(hung)} still running after {repro.timeout_s:g}s (scaled to the "
            "start-up), as when it failed"
        )
    if dead:
        return EXIT_NO_VERDICT, (
            f"NO VERDICT: rank process died: {sorted(dead.items())} (it {failed['summary']} when it failed)"
        )
    raised = {r: reply for r, (what, reply) in replies.items() if what == "raised"}
    if failed["kind"] == "raised":
        again = {r: reply for r, reply in raised.items() if reply[0] in failed["types"].values()}
        if again:
            r, (kind, message, _) = sorted(again.items())[0]
            return EXIT_BUG, f"BUG: rank {r} raised {kind}: {message.splitlines()[0] if message else ''}"
    if raised:
        r, (kind, message, text) = sorted(raised.items())[0]
        sys.stderr.write(text)
        first = message.splitlines()[0] if message else ""
        return EXIT_NO_VERDICT, f"NO VERDICT: rank {r} raised {kind}: {first} (not the failure stored)"
    if hung:
        return EXIT_NO_VERDICT, (
            f"NO VERDICT: ranks {sorted(hung)} did not finish the call within {repro.timeout_s:g}s (scaled)"
        )
    results = [pickle.loads(replies[r][1]) for r in range(repro.world_size)]
    if failed["kind"] == "results":
        rejected = pickle.loads(base64.b64decode("".join(failed["results"])))
        if same(results, rejected):
            return EXIT_BUG, f"BUG: the ranks returned the results the property rejected: {repr(results)[:300]}"
        return EXIT_FIXED, (
            f"FIXED: the ranks no longer return the results the property rejected; now {repr(results)[:300]}"
        )
    return EXIT_FIXED, f"FIXED: the call completed on every rank (when it failed: {failed['summary']})"


# -- the parent -------------------------------------------------------------------------------


def free_port() -> int:
    """A port free on the loopback address now, for the rendezvous."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def reproduce(repro: Reproducer) -> tuple[int, str]:
    """Spawn the ranks, run the calls; (exit code, line)."""
    sys.path[:0] = [p for p in repro.paths if p not in sys.path]
    port = free_port()
    context = mp.get_context("spawn")
    replies = context.Queue()
    tmpdir = tempfile.mkdtemp(prefix="fuzzdist-repro-")
    ranks = [
        context.Process(target=rank_main, args=(repro, r, port, tmpdir, replies), daemon=True)
        for r in range(repro.world_size)
    ]
    started = time.monotonic()
    for p in ranks:
        p.start()
    try:
        return run_calls(repro, ranks, replies, started)
    finally:
        for p in ranks:
            p.join(timeout=1)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        shutil.rmtree(tmpdir, ignore_errors=True)


def run_calls(repro: Reproducer, ranks: list[Any], replies: Any, started: float) -> tuple[int, str]:
    """Wait for the ranks to start, then for each call's replies; the last call's verdict."""
    ready: set[int] = set()
    inbox: dict[int, dict[int, tuple[str, Any]]] = {}  # call -> {rank: reply}: a rank may be a call ahead
    while len(ready) < repro.world_size:
        exited = {r: p.exitcode for r, p in enumerate(ranks) if p.exitcode is not None}
        if exited:
            return EXIT_NO_VERDICT, f"NO VERDICT: rank(s) {sorted(exited)} exited while starting (exit codes {exited})"
        if time.monotonic() - started > repro.startup_s:
            return EXIT_NO_VERDICT, f"NO VERDICT: the ranks did not start within {repro.startup_s:g}s"
        try:
            rank, call, what, data = replies.get(timeout=0.5)
        except queue.Empty:
            continue
        ready.add(rank)
        if call >= 0:
            inbox.setdefault(call, {})[rank] = (what, data)
    # A slow machine gets a proportionally longer wait: start-up took `slow` times a quick one.
    slow = max(1.0, (time.monotonic() - started) / 10.0)
    last = len(repro.calls) - 1
    for i in range(len(repro.calls)):
        got = inbox.setdefault(i, {})
        deadline = time.monotonic() + repro.timeout_s * slow
        dead: dict[int, int] = {}
        while len(got) < repro.world_size and time.monotonic() < deadline:
            try:
                rank, call, what, data = replies.get(timeout=0.2)
                inbox.setdefault(call, {})[rank] = (what, data)
            except queue.Empty:
                dead = {r: p.exitcode for r, p in enumerate(ranks) if p.exitcode not in (None, 0) and r not in got}
                if dead:
                    break
                if any(what == "raised" for what, _ in got.values()):
                    deadline = min(deadline, time.monotonic() + 5.0 * slow)  # peers of a raising rank may wait forever
        hung = set(range(repro.world_size)) - set(got) - set(dead)
        if i < last:
            if dead or hung or any(what != "ok" for what, _ in got.values()):
                bad = {
                    r: reply[1][0] if reply[0] == "raised" else reply[0] for r, reply in got.items() if reply[0] != "ok"
                }
                return EXIT_NO_VERDICT, (
                    f"NO VERDICT: call {i + 1} of {len(repro.calls)}, which passed when the "
                    f"property failed, failed now (raised: {bad}, died: {dead}, "
                    f"unfinished: {sorted(hung)})"
                )
            continue
        return verdict(repro, got, {r: describe_exit(c) for r, c in dead.items()}, hung)
    return EXIT_NO_VERDICT, "NO VERDICT: no call to check"


def main(repro: Reproducer) -> int:
    """The script's entry point: print the verdict's one line; its exit code."""
    try:
        code, line = reproduce(repro)
    except Exception:  # noqa: BLE001 - the script itself failed: neither verdict
        traceback.print_exc()
        code, line = EXIT_NO_VERDICT, "NO VERDICT: the script itself failed (traceback above)"
    print(f"{line}  [{repro.nodeid}]")
    return code
