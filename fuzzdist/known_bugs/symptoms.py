"""What a check adds to a failure when a wrong result is exactly what a known torch bug computes, so
that the bug's predicate (``fuzzdist.known_bugs.torch_bugs``) can recognise the symptom.  A leaf module:
the checks and the predicates import it, and it imports nothing of fuzzdist's."""

from __future__ import annotations

# broadcast: a receiver holds the source's elements in the order of its memory
BROADCAST_STRIDES_IGNORED = "holds the source's elements in the order of its memory: strides ignored"
# autograd collectives: a result equals what a write ignoring the output's strides leaves
STRIDES_IGNORED = "exactly what a write that ignores the output's strides leaves"
# autograd all_reduce: an input gradient equals the forward's op over the upstream gradients
FORWARD_OP_ON_GRADS = "exactly the forward's op over the upstream gradients"
# check-pg: bools right by truth value that hold other bytes
BOOL_BYTES_NOT_0_OR_1 = "hold a byte other than 0 and 1"
# check-pg's async check: a repeated wait() that blocked (fuzzdist.conformance._rank)
REPEAT_WAIT_BLOCKED = "a repeated wait() on a Work that had completed did not return"
# check-pg: gloo's CHECK on reduce_scatter_tensor's stack form
STACK_CHECK = "outputShape[0] * worldSize == inputShape[0]"
# functional collectives: what a call raised on a rank, re-raised naming the call (a RuntimeError)
CALL_RAISED = "call {index} {op} raised {type}: {message}"
# subgroups: on a mesh dimension whose ranks are not ascending, what the ascending order gives
MESH_SORTED_ORDER = "exactly what the dimension's ranks in ascending order give"
# subgroups: the rank functions a rank left waiting by a failed rendezvous stands in (its group making,
# its collectives); tests/known_bugs/test_known_bugs_registry.py checks fuzzdist.properties.subgroups defines them
SUBGROUP_MAKING = "_make_groups"
SUBGROUP_OPS = "_run_op"
# p2p: a send/receive refused with an error that doesn't say why
REFUSED_UNCLEARLY = "was refused, but the error does not say why"
# object collectives: what a rank's collective raised ("{op} raised {type}: {message}")
OBJECT_CALL_RAISED = "{op} raised {type}: {message}"
# autograd reduce/reduce_scatter: an input gradient equals SUM's, whatever the forward's op
SUM_GRAD_FOR_ANY_OP = "exactly SUM's gradient: the forward's op ignored"
