"""Point-to-point: every receiver gets exactly the sender's tensor, over ``batch_isend_irecv``,
``isend``/``irecv`` and ``send``/``recv``, for drawn pairs, tags and issue orders; a self-loop (a rank
sending to itself, which torch documents as allowed for ``isend``/``irecv``: "isend allows src == dst
rank, i.e. send to self") either delivers exactly the sent values or is refused at once with an error
that says the peer is the rank itself; a non-contiguous tensor on gloo is refused at once with an
error that says why; nothing hangs.

An example is a list of messages ``(src, dst, tag, spec, seed)`` and one API:

* ``batch`` and ``isend``: each rank posts the sends and receives it takes part in, in a drawn
  permutation of its own (so a receive may be posted long before or after its send), then waits
  for every Work once; messages between the same pair of ranks are matched by their tags, which
  are distinct per pair (two messages with one tag between one pair are matched first-in,
  first-out, so their order would have to agree on both sides: not what this property is about);
* ``blocking``: every rank walks the message list in its drawn order, sending or receiving the
  messages it takes part in (the list's order is the issue order, the same on both sides, so no
  blocking send waits on a receive that comes later).

Self-loops and non-contiguous messages are tried apart from the messages that must go through,
after them: a refused op of a batch would leave the ops posted before it without their peers.
A self-loop is tried whole on its rank, the send posted before the receive (``send`` then ``recv``
for the blocking API), then each Work waited once: the received tensor must equal the sent one,
or the first refused call must say the peer is the rank itself (``"same as the rank of the current
process"``, as ``dist.send`` says); a receive refused after its send was accepted is a problem too.
A non-contiguous message is tried side by side (its send, its receive) and must be refused, with
an error that names contiguity (or, for a self-loop, the rank); one that is accepted is never waited
on, and the rank processes are replaced before the next example (``ctx.request_recycle``), so its
pending receive can't take a later example's message.  Every wait here is bounded by the pool's
timeout, so a hang is a ``RankTimeout``.

A second ``wait()`` on a send/recv Work blocks until its timeout on gloo (the known bug
``gloo-p2p-second-wait-blocks``): this property waits on each Work exactly once, so it can't meet
that bug; ``check-pg``'s async check is where it shows.  On gloo (torch 2.13) isend/irecv/recv/
batch_isend_irecv to or from the rank itself neither deliver nor refuse clearly: they fail with
gloo's internal "Pair is not connected" enforce (``dist.send`` checks the rank first and refuses
clearly): that is the known bug ``gloo-p2p-self-loop-unclear-error`` (in
``known_bugs.py next to it``).  Once torch delivers self-loops (or refuses them clearly), the property passes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from hypothesis import strategies as st

from fuzzdist import strategies as fst
from fuzzdist.known_bugs import known_failures
from fuzzdist.pool.capabilities.gloo import GLOO_DTYPES
from fuzzdist.problems import Kind, Problem, Symptom
from fuzzdist.properties._results import fail_on_ranks_with_problems
from fuzzdist.toolkit.checks import first_difference

if TYPE_CHECKING:
    from fuzzdist.pool import Pool
    from fuzzdist.pool.rank.context import RankContext

APIS = ("batch", "isend", "blocking")
MAX_BYTES = 4096
MAX_TAG = 7
SEEDS = fst.seeds()


@dataclass(frozen=True)
class Message:
    """``src`` sends ``spec.materialize(seed)`` to ``dst`` with ``tag``; ``src == dst`` is a self-loop."""

    src: int
    dst: int
    tag: int
    spec: fst.TensorSpec
    seed: int

    @property
    def self_loop(self) -> bool:
        """Whether the rank sends to itself: delivered, or refused clearly, both are right."""
        return self.src == self.dst

    @property
    def refused(self) -> bool:
        """Whether the API must refuse it: a tensor that is not contiguous."""
        return not _contiguous(self.spec)

    @property
    def apart(self) -> bool:
        """Whether it is tried apart from the messages that must go through: a self-loop, or refused."""
        return self.self_loop or self.refused


@dataclass(frozen=True)
class P2PCase:
    """One example: the messages, the API, and per rank the order it issues its ops in (a permutation
    of the indices of the messages it takes part in, that must go through)."""

    api: str
    messages: tuple[Message, ...]
    orders: tuple[tuple[int, ...], ...]


@functools.cache
def _contiguous(spec: fst.TensorSpec) -> bool:
    """Whether torch counts the spec's tensor as contiguous (a transposed or channels_last layout may
    still be, for size-1 dims)."""
    return spec.materialize("cpu", 0).is_contiguous()


def decoy(spec: fst.TensorSpec, seed: int, device: Any = "cpu") -> torch.Tensor:
    """A receive buffer in the layout of ``spec``, every element of which differs, bit for bit, from the
    message ``spec.materialize(seed)``: 1 where the message holds 0 (-0.0 and False too), 0 elsewhere (NaN
    too).  So a receive that writes nothing, or only part of the buffer, can never pass by chance."""
    buffer = spec.materialize(device, seed)
    return buffer.copy_(buffer == 0)


def ops_of(case: P2PCase, rank: int) -> list[int]:
    """The indices of the messages ``rank`` sends or receives that must go through (neither a self-loop
    nor refused), in message order."""
    return [i for i, m in enumerate(case.messages) if not m.apart and rank in (m.src, m.dst)]


# ---------------------------------------------------------------------------
# on the ranks


def _default_api() -> dict[str, Callable[..., Any]]:
    return {
        "isend": dist.isend,
        "irecv": dist.irecv,
        "send": dist.send,
        "recv": dist.recv,
        "batch_isend_irecv": dist.batch_isend_irecv,
    }


# torch's wording ("Invalid destination rank: should not be the same as the rank of the current process"):
# not a bare "self", which an unrelated TypeError about a method's 'self' would match.
_CLEAR_REFUSAL = {
    "self": re.compile(r"same as the rank of the current process|own rank", re.I),
    "layout": re.compile(r"contiguous", re.I),
}


def _try_refused(
    m: Message, sending: bool, api: str, fns: dict[str, Callable[..., Any]], group: Any, pending: list[str]
) -> Problem | None:
    """Issue the send (or receive) of ``m``, which must be refused; None if it was, with a clear error.
    An accepted op is never waited on (it may never complete): it is added to ``pending``."""
    tensor = m.spec.materialize("cpu", m.seed)
    if not sending:
        tensor = torch.zeros_like(tensor)  # keeps the layout
    peer = m.dst if sending else m.src
    reasons = [name for name, applies in (("self", m.src == m.dst), ("layout", not _contiguous(m.spec))) if applies]
    label = f"{'send to' if sending else 'receive from'} rank {peer} (tag {m.tag}, {m.spec})"
    try:
        if api == "batch":
            op = fns["isend"] if sending else fns["irecv"]
            works = fns["batch_isend_irecv"]([dist.P2POp(op, tensor, peer, group=group, tag=m.tag)])
        elif api == "isend":
            works = [(fns["isend"] if sending else fns["irecv"])(tensor, peer, group=group, tag=m.tag)]
        else:
            (fns["send"] if sending else fns["recv"])(tensor, peer, group=group, tag=m.tag)
            works = []
    except Exception as exc:  # noqa: BLE001 - the refusal this looks for
        if any(_CLEAR_REFUSAL[reason].search(str(exc)) for reason in reasons):
            return None
        return _refused_unclearly(f"{api} {label}", exc, peer, m.tag)
    # Not refused: don't wait on what can never complete; say so.
    pending.append(label)
    return Problem(
        Kind.NOTE,
        f"{api} {label}",
        subject=(peer, m.tag),
        detail=f"was accepted ({len(works)} Work(s)) where it should be refused",
    )


def _refused_unclearly(what: str, exc: Exception, peer: int, tag: int) -> Problem:
    """A send or receive of ``what`` to or from ``peer`` with ``tag`` refused with ``exc``, whose words don't
    say why."""
    return Problem.raised(exc, what, symptom=Symptom.REFUSED_UNCLEARLY, subject=(peer, tag))


def _try_self_loop(
    m: Message, api: str, fns: dict[str, Callable[..., Any]], group: Any, device: str | torch.device, pending: list[str]
) -> Problem | None:
    """Send ``m`` (contiguous) from its rank to itself and receive it; None if the receive got exactly the
    sent values, or if the first refused call said the peer is the rank itself.  Works left un-waited
    by a refusal are added to ``pending``."""
    expected = m.spec.materialize(device, m.seed)
    received = decoy(m.spec, m.seed, device)
    rank = m.src
    step = f"send to rank {rank}"
    accepted: list[str] = []  # the calls that went through before one was refused
    works: list[Any] = []
    waited = 0
    try:
        if api == "batch":
            works = fns["batch_isend_irecv"](
                [
                    dist.P2POp(fns["isend"], m.spec.materialize(device, m.seed), rank, group=group, tag=m.tag),
                    dist.P2POp(fns["irecv"], received, rank, group=group, tag=m.tag),
                ]
            )
        elif api == "isend":
            works = [fns["isend"](m.spec.materialize(device, m.seed), rank, group=group, tag=m.tag)]
            accepted.append("isend")
            step = f"receive from rank {rank}"
            works.append(fns["irecv"](received, rank, group=group, tag=m.tag))
        else:
            fns["send"](m.spec.materialize(device, m.seed), rank, group=group, tag=m.tag)
            accepted.append("send")
            step = f"receive from rank {rank}"
            fns["recv"](received, rank, group=group, tag=m.tag)
            works = []
        step = f"wait for the send to rank {rank} and the receive from it"
        for work in works:  # each once: see gloo-p2p-second-wait-blocks
            work.wait()
            waited += 1
    except Exception as exc:  # noqa: BLE001 - a refusal is one of the two right outcomes
        if accepted or waited < len(works):
            pending.append(f"self-loop on rank {rank} (tag {m.tag})")
        label = f"{api} {step} (tag {m.tag}, {m.spec}, a self-loop)"
        if not _CLEAR_REFUSAL["self"].search(str(exc)):
            return _refused_unclearly(label, exc, rank, m.tag)
        if accepted:
            return Problem.raised(
                exc, label, subject=(rank, m.tag), detail=f"(refused after its {accepted[-1]} was accepted)"
            )
        return None
    diff = first_difference(received, expected)
    if diff is not None:
        return diff.about(
            f"{api} self-loop message on rank {rank} (tag {m.tag}, {m.spec}) delivered wrong values",
            subject=(rank, m.tag),
        )
    return None


def p2p_and_check(
    ctx: RankContext, case: P2PCase, api: dict[str, Callable[..., Any]] | None = None
) -> list[Problem] | None:
    """On every rank: issue this rank's ops of ``case`` in its drawn order, wait for each Work once, then
    try its self-loops and the ops that must be refused; None if every received tensor is the sender's,
    every self-loop delivered or was refused clearly and every refusal was clear, else what went wrong.
    ``api`` maps the torch function names to stand-ins."""
    fns = _default_api() if api is None else {**_default_api(), **api}
    rank, group = ctx.rank, ctx.group
    problems: list[Problem] = []
    received: dict[int, torch.Tensor] = {}
    expected: dict[int, torch.Tensor] = {}
    posted: list[tuple[Any, Any]] = []  # (kind, tensor) in issue order
    for i in case.orders[rank]:
        m = case.messages[i]
        if m.dst == rank:
            # built before the op, from the drawn spec and seed: independent of what arrives
            expected[i] = m.spec.materialize(ctx.device, m.seed)
            received[i] = decoy(m.spec, m.seed, ctx.device)
            posted.append(("recv", i))
        else:
            posted.append(("send", i))
    if case.api == "blocking":
        for kind, i in posted:
            m = case.messages[i]
            if kind == "send":
                fns["send"](m.spec.materialize(ctx.device, m.seed), m.dst, group=group, tag=m.tag)
            else:
                fns["recv"](received[i], m.src, group=group, tag=m.tag)
    else:
        p2p_ops = []
        for kind, i in posted:
            m = case.messages[i]
            if kind == "send":
                p2p_ops.append((fns["isend"], m.spec.materialize(ctx.device, m.seed), m.dst, m.tag))
            else:
                p2p_ops.append((fns["irecv"], received[i], m.src, m.tag))
        if case.api == "batch":
            works = (
                fns["batch_isend_irecv"](
                    [dist.P2POp(op, t, peer, group=group, tag=tag) for op, t, peer, tag in p2p_ops]
                )
                if p2p_ops
                else []
            )
        else:
            works = [op(t, peer, group=group, tag=tag) for op, t, peer, tag in p2p_ops]
        # Each Work is waited exactly once: a second wait() on a gloo send/recv Work blocks until its
        # timeout (known bug gloo-p2p-second-wait-blocks), which is check-pg's to show, not this property's.
        for work in works:
            work.wait()
    for i, tensor in received.items():
        diff = first_difference(tensor, expected[i])
        if diff is not None:
            m = case.messages[i]
            problems.append(
                diff.about(f"message #{i} from rank {m.src} (tag {m.tag}, {m.spec})", subject=(m.src, m.tag))
            )
    if group is not None:
        dist.barrier(group=group)  # every message is in before any rank tries a self-loop or a refusal
    pending: list[str] = []  # ops accepted (or posted) and never waited on
    for m in case.messages:
        if m.self_loop and not m.refused and m.src == rank:
            problem = _try_self_loop(m, case.api, fns, group, ctx.device, pending)
            if problem is not None:
                problems.append(problem)
            continue
        roles = [sending for sending, r in ((True, m.src), (False, m.dst)) if r == rank] if m.refused else []
        for sending in roles:  # a self-loop: this rank tries both its send and its receive
            problem = _try_refused(m, sending, case.api, fns, group, pending)
            if problem is not None:
                problems.append(problem)
    if pending:
        # An un-waited receive could take a later example's message with the same peer and tag (and
        # change the failure while Hypothesis shrinks): fresh rank processes for the next example.
        ctx.request_recycle(f"point-to-point ops left pending: {'; '.join(pending)}")
    return problems or None


# ---------------------------------------------------------------------------
# strategies


SPECS = fst.tensor_specs(dtypes=st.sampled_from(GLOO_DTYPES), max_bytes=MAX_BYTES)


@st.composite
def p2p_cases(
    draw: st.DrawFn,
    world_size: int,
    apis: st.SearchStrategy[str] | None = None,
    specs: st.SearchStrategy[fst.TensorSpec] = SPECS,
) -> P2PCase:
    """A P2PCase for ``world_size`` ranks (at least 2): 1 to 5 messages between drawn pairs (a self-loop,
    one message in ten), distinct tags per pair, every layout, and a drawn issue order per rank.  Shrinks
    to one contiguous float32[1] message from rank 0 to rank 1, tag 0, over ``batch_isend_irecv``."""
    api = draw(st.sampled_from(APIS) if apis is None else apis, label="api")
    ranks = st.integers(0, world_size - 1)

    @st.composite
    def pair(d: st.DrawFn) -> tuple[int, int]:
        src = d(ranks)
        if d(st.integers(0, 9)) == 9:  # a self-loop, one message in ten
            return src, src
        other = d(st.integers(0, world_size - 2))
        return src, (other + 1 + src) % world_size

    raw = draw(
        st.lists(st.tuples(pair(), st.integers(0, MAX_TAG)), min_size=1, max_size=5, unique_by=lambda pt: pt),
        label="pairs",
    )
    messages = tuple(Message(src, dst, tag, draw(specs), draw(SEEDS)) for (src, dst), tag in raw)
    case = P2PCase(api, messages, ())
    orders = tuple(
        tuple(draw(st.permutations(ops_of(case, r)))) if api != "blocking" else tuple(ops_of(case, r))
        for r in range(world_size)
    )
    return P2PCase(api, messages, orders)


# ---------------------------------------------------------------------------
# the known bug (its entry is in known_bugs.py next to it), and the driver-side check


def check(pool: Pool, case: P2PCase, *, api: dict[str, Callable[..., Any]] | None = None) -> None:
    """Run ``case`` over ``pool`` with torch's point-to-point functions (or the stand-ins in ``api``,
    keyed by torch's names: ``isend``, ``irecv``, ``send``, ``recv``, ``batch_isend_irecv``); raise
    :class:`PropertyFailure` naming each rank that received wrong values or saw an unclear refusal."""
    with known_failures("p2p", case=case):
        results = pool.run(p2p_and_check, case, api=api)
        fail_on_ranks_with_problems(results, f"went wrong in {case.api} point-to-point")
