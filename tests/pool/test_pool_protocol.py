"""The pool protocol in-process: named messages, the rank's Worker, the controller's Outcome."""

from __future__ import annotations

import pickle
import threading

import pytest
import torch

from fuzzdist import CallError, RankContext
from fuzzdist.pool import Pool, messages
from fuzzdist.pool.controller import Outcome, decode_reply, derive_seed, pickle_call
from fuzzdist.pool.rank.worker import Worker


def seed_and_sum(ctx, a, b=0):
    return (ctx.seed, ctx.example, a + b)


def returns_a_lock(ctx):
    return threading.Lock()


def pollute_env(ctx):
    import os

    seen = os.environ.get("FUZZDIST_TEST_AHEAD")
    os.environ["FUZZDIST_TEST_AHEAD"] = str(ctx.example)
    return seen


class _ListChannel:
    """Feeds the Worker a fixed list of messages and keeps its replies."""

    lost_exit_code = 3

    def __init__(self, *sent: bytes) -> None:
        self._sent = list(sent)
        self.replies: list[messages.Message] = []

    def receive(self):
        return messages.load(self._sent.pop(0)) if self._sent else None

    def send(self, data: bytes) -> bool:
        self.replies.append(messages.load(data))
        return True


def _ctx(tmp_path) -> RankContext:
    return RankContext(0, 1, torch.device("cpu"), "gloo", None, None, str(tmp_path))


def test_worker_answers_run_by_name_and_stops(tmp_path):
    payload = pickle_call(seed_and_sum, (2,), {"b": 3})
    channel = _ListChannel(
        messages.run(7, derive_seed(payload), payload, None), messages.stop(), messages.run(8, 0, payload, None)
    )
    assert Worker(_ctx(tmp_path)).serve(channel) == 0  # stopped before the last message
    ((name, fields),) = channel.replies
    elapsed = fields.pop("elapsed")  # the rank's wall time: a duration, not a fixed value
    assert isinstance(elapsed, float) and 0 <= elapsed < 60
    assert (name, fields) == ("ok", {"seq": 7, "result": (derive_seed(payload), 7, 5), "recycle": [], "output": None})


def test_worker_snapshots_each_example_ahead_and_still_restores_it(tmp_path):
    # The Worker takes the next example's snapshot while it waits (after its reply): every example
    # must still find the state as it was before the first, never the previous example's change.
    payload = pickle_call(pollute_env, (), {})
    channel = _ListChannel(*(messages.run(seq, 0, payload, None) for seq in (1, 2, 3)))
    worker = Worker(_ctx(tmp_path))
    try:
        worker.serve(channel)
    finally:
        import os

        os.environ.pop("FUZZDIST_TEST_AHEAD", None)
    assert [fields["result"] for _, fields in channel.replies] == [None, None, None]


def test_worker_returns_the_channels_code_when_the_controller_is_gone(tmp_path):
    assert Worker(_ctx(tmp_path)).serve(_ListChannel()) == _ListChannel.lost_exit_code


def test_unpicklable_result_is_the_ranks_call_error(tmp_path):
    payload = pickle_call(returns_a_lock, (), {})
    channel = _ListChannel(messages.run(1, 0, payload, None))
    Worker(_ctx(tmp_path)).serve(channel)
    ((name, fields),) = channel.replies
    assert name == "err" and fields["error"].type_name == "fuzzdist.errors.CallError"
    assert "can't be sent back to the driver" in fields["error"].message


def test_a_reply_the_driver_cant_unpickle_is_an_error_not_a_broken_pool():
    name, fields = decode_reply(b"not a pickle", rank=1, seq=4)
    assert name == "err" and fields["seq"] == 4 and fields["error"].type_name == "fuzzdist.errors.CallError"


def test_outcome_files_replies_by_name():
    out = Outcome(seq=3, world_size=2, straggler_grace=5.0)
    out.take(0, messages.load(messages.ok(3, "r0", ["recycle me"], elapsed=0.25)))
    assert out.results == ["r0", None] and out.pending == {1} and out.recycle == ["recycle me"]
    assert out.elapsed == {0: 0.25}
    assert out.grace_deadline == float("inf")
    out.take(1, ("err", {"seq": 3, "error": "record", "recycle": []}))  # as older ranks send it: no output, elapsed
    assert out.errors == {1: "record"} and not out.pending and out.grace_deadline < float("inf")
    assert out.elapsed == {0: 0.25}
    with pytest.raises(RuntimeError, match="fuzzdist bug: rank 0 answered example 2, expected 3"):
        out.take(0, messages.load(messages.ok(2, None, [])))
    with pytest.raises(RuntimeError, match="fuzzdist bug: Outcome got the unexpected message 'ready'"):
        out.take(0, messages.load(messages.ready(123)))


def test_seed_is_a_hash_of_the_pickled_call():
    """Saved examples replay with the seed they failed with: the derivation must not change."""
    payload = pickle.dumps((seed_and_sum, (1,), {}), protocol=pickle.HIGHEST_PROTOCOL)
    assert pickle_call(seed_and_sum, (1,), {}) == payload
    assert derive_seed(b"fuzzdist") == 293933300143382853


def test_call_errors_are_type_errors():
    with pytest.raises(TypeError, match="lambdas and nested functions") as info:
        pickle_call(lambda ctx: None, (), {})
    assert isinstance(info.value, CallError)


def test_rank_pool_is_a_pool(rank_pool):
    assert isinstance(rank_pool, Pool)
