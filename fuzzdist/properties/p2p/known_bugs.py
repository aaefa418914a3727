"""The known torch bugs the point-to-point property runs into.

One :func:`~fuzzdist.known_bugs.register` call per bug (``fuzzdist.known_bugs`` collects this module by
name).  A predicate matches the fields of the failure's :class:`~fuzzdist.problems.Problem` records and the
example's types, never a message's words; what torch itself said it reads only through
:func:`fuzzdist.known_bugs.evidence.says`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzzdist.known_bugs import evidence
from fuzzdist.known_bugs.predicates import example_of
from fuzzdist.known_bugs.registry import KnownBug, register
from fuzzdist.problems import Symptom
from fuzzdist.properties.p2p import P2PCase

# What the p2p property's self-loop tries report for a refusal that doesn't say why: the peer and the tag.
# gloo's words: "Pair is not connected" (torch 2.13, 2.14), "writev [none]: Bad file descriptor" from
# the same tcp pair (torch 2.6.0; the reproducer prints it there).
_UNCLEAR = r"Pair is not connected|tcp/pair\.cc:\d+\] writev \[none\]: Bad file descriptor"


def _is_self_loop_unclear(example: Mapping[str, Any], failure: BaseException) -> bool:
    """Every problem is a self-loop refused with gloo's "Pair is not connected" enforce, an error that
    doesn't say the peer is the rank itself (a self-loop may deliver, or be refused clearly): the rank
    that reported it, the peer it names and the tag are a drawn message from that rank to itself."""
    case = example_of(example, "case", P2PCase)
    messages = None if case is None else case.messages
    by_rank = evidence.reported_by_rank(failure)
    if messages is None or by_rank is None:
        return False
    loops = {(m.src, m.tag) for m in messages if m.src == m.dst}
    seen = False
    for rank, problems in enumerate(by_rank):
        for problem in problems:
            if (
                problem.symptom is not Symptom.REFUSED_UNCLEARLY
                or problem.subject[:1] != (rank,)
                or (rank, problem.subject[1]) not in loops
                or not evidence.says_pattern(problem, _UNCLEAR)
            ):
                return False
            seen = True
    return seen


GLOO_P2P_SELF_LOOP_UNCLEAR = register(
    KnownBug(id="gloo-p2p-self-loop-unclear-error", where=("p2p",), recognise=_is_self_loop_unclear)
)
