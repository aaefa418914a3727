"""Signal handlers compose: each chains to the handler it replaced, in either installation order.

Under ``torchrun -m fuzzdist run`` both the TorchrunPool and the campaign
handle SIGTERM; neither may silence the other (the end-to-end check is in
tests/pool/test_torchrun.py).  The tests that could end the process with SIGTERM
run in a child process (tests/helpers/signals_child.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fuzzdist.pool import torchrun_stop
from fuzzdist.pool.signals import ChainedHandler, Hold, held
from fuzzdist.pool.torchrun_stop import VERDICT_S, Verdict

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


class Stop(Exception):
    pass


@pytest.fixture
def below():
    """A Python handler installed before the test's (it records its calls): no test here can end pytest."""
    calls: list[str] = []

    def handler(signum, frame):
        calls.append("below")

    original = signal.signal(signal.SIGTERM, handler)
    yield calls, handler
    signal.signal(signal.SIGTERM, original)


@pytest.mark.parametrize("remove_in_install_order", [False, True])
@pytest.mark.parametrize("raiser_first", [False, True])
def test_chained_handlers_all_run_whatever_the_order(below, raiser_first, remove_in_install_order):
    calls, handler_below = below

    def flag(signum, frame):
        calls.append("flag")

    def raiser(signum, frame):
        calls.append("raise")
        raise Stop

    order = [raiser, flag] if raiser_first else [flag, raiser]
    installed = [ChainedHandler(signal.SIGTERM, fn) for fn in order]
    with pytest.raises(Stop):
        signal.raise_signal(signal.SIGTERM)
    # The handler replaced runs first, then each one installed over it.
    assert calls == ["below", *("raise" if fn is raiser else "flag" for fn in order)]
    for chained in installed if remove_in_install_order else reversed(installed):
        chained.remove()
    assert signal.getsignal(signal.SIGTERM) is handler_below
    calls.clear()
    signal.raise_signal(signal.SIGTERM)
    assert calls == ["below"]


def test_a_removed_handler_under_another_passes_the_signal_on(below):
    calls, handler_below = below
    lower = ChainedHandler(signal.SIGTERM, lambda s, f: calls.append("lower"))
    upper = ChainedHandler(signal.SIGTERM, lambda s, f: calls.append("upper"))
    lower.remove()  # upper is installed: lower stays in the chain as a pass-through
    assert signal.getsignal(signal.SIGTERM) is upper
    signal.raise_signal(signal.SIGTERM)
    assert calls == ["below", "upper"]
    upper.remove()  # skips the removed one
    assert signal.getsignal(signal.SIGTERM) is handler_below


def test_both_handlers_raising_the_later_one_wins(below):
    def first_raises(signum, frame):
        raise KeyError("first")

    def second_raises(signum, frame):
        raise Stop("second")

    first = ChainedHandler(signal.SIGTERM, first_raises)
    second = ChainedHandler(signal.SIGTERM, second_raises)
    try:
        with pytest.raises(Stop) as info:
            signal.raise_signal(signal.SIGTERM)
        assert isinstance(info.value.__context__, KeyError)  # the other one's exception is chained, not lost
    finally:
        second.remove()
        first.remove()


def test_sig_ign_below_does_nothing():
    calls = []
    original = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        chained = ChainedHandler(signal.SIGTERM, lambda s, f: calls.append("own"))
        signal.raise_signal(signal.SIGTERM)
        chained.remove()
        assert calls == ["own"] and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, original)


def _child(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HELPERS / "signals_child.py"), *args], capture_output=True, text=True, timeout=120
    )


def _lines(proc: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_campaign_and_torchrun_pool_handlers_both_run_in_either_order():
    """fuzzdist run's SIGTERM handler and TorchrunPool's, over SIG_DFL as in a real run: whichever is
    installed first, the pool marks itself stopping, the campaign raises Terminated (and so ends the
    process itself: SIG_DFL's default action doesn't kill it first), and closing both restores SIG_DFL."""
    proc = _child("compose")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _lines(proc)
    assert [r["pool_first"] for r in results] == [True, False], proc.stdout + proc.stderr
    for r in results:
        assert r["raised"] == "SIGTERM" and r["campaign_saw"] == ["SIGTERM"], r
        assert r["pool_stopping"] and r["restored"], r


def test_a_bare_pool_does_not_swallow_sigterm_between_examples():
    """Nothing in flight to save and nothing else handles SIGTERM: the process ends, killed by it."""
    proc = _child("pool-idle")
    assert proc.returncode == -signal.SIGTERM, proc.stdout + proc.stderr
    assert _lines(proc) == [{"raising": True}], proc.stdout


def test_a_bare_pool_turns_the_example_in_flight_into_a_rank_crash():
    """With an example in flight the pool keeps the process alive to report it: a RankCrash of the rank that
    did not answer, then PoolGone (which ends the driver's run)."""
    proc = _child("pool-in-flight")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _lines(proc) == [{"pool_stopping": True, "first": ["RankCrash", [1]], "second": "PoolGone"}], proc.stdout


# -- Hold: a signal's effect on the main thread's work waits -------------------------------------------


def test_a_hold_defers_what_the_chain_raises_to_its_end(below):
    calls, _ = below

    def raiser(signum, frame):
        calls.append("raise")
        raise Stop

    chained = ChainedHandler(signal.SIGTERM, raiser)
    try:
        with pytest.raises(Stop):
            with Hold(signal.SIGTERM):
                assert held(signal.SIGTERM)
                signal.raise_signal(signal.SIGTERM)
                calls.append("held")  # still running: the handlers ran, their exception waits
        assert calls == ["below", "raise", "held"]
        assert not held(signal.SIGTERM)
        with Hold(signal.SIGTERM):  # nothing left over
            pass
    finally:
        chained.remove()


def test_a_hold_ending_with_its_own_failure_raises_the_interrupt_at_the_next_hold(below):
    calls, _ = below
    chained = ChainedHandler(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(Stop()))
    try:
        with pytest.raises(KeyError):  # the holder's failure goes on unchanged (Hypothesis records it)
            with Hold(signal.SIGTERM):
                signal.raise_signal(signal.SIGTERM)
                raise KeyError("the example's failure")
        with pytest.raises(Stop):  # the interrupt is not lost: the next hold raises it before its work
            with Hold(signal.SIGTERM):
                calls.append("never")
        assert "never" not in calls
        with Hold(signal.SIGTERM):  # delivered once
            pass
    finally:
        chained.remove()


def test_a_hold_outside_the_main_thread_holds_nothing(below):
    """Handlers run in the main thread: a hold elsewhere can't say when the main thread's work ends."""
    chained = ChainedHandler(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(Stop()))
    opened, release = threading.Event(), threading.Event()

    def hold_elsewhere():
        with Hold(signal.SIGTERM):
            opened.set()
            release.wait(30)

    thread = threading.Thread(target=hold_elsewhere)
    thread.start()
    try:
        assert opened.wait(30)
        assert not held(signal.SIGTERM)
        with pytest.raises(Stop):
            signal.raise_signal(signal.SIGTERM)
    finally:
        release.set()
        thread.join(30)
        chained.remove()


@pytest.mark.parametrize("ending", ["ok", "failure"])
def test_a_held_default_action_waits_for_the_end_and_is_not_done_over_a_failure(ending):
    """SIG_DFL below the chain: the process outlives the signal until the hold ends; a hold ending with a
    failure keeps the process alive to report it (the holder sees to ending the work)."""
    proc = _child("hold-default", ending)
    lines = _lines(proc)
    assert lines[:2] == [{"handler_ran": True}, {"held": True}], proc.stdout + proc.stderr
    if ending == "ok":
        assert proc.returncode == -signal.SIGTERM and len(lines) == 2, proc.stdout
    else:
        assert proc.returncode == 0 and lines[2:] == [{"raised": "a failure to report"}, {"survived": True}]


# -- under torchrun: a dead rank is told from a stopped one -----------------------------------------------


def test_a_bare_pool_records_no_crash_when_the_other_ranks_were_stopped_too():
    """Rank 1 marked that it received the SIGTERM: the job is being stopped, nothing died, so no RankCrash; with
    nothing else handling SIGTERM the process ends as SIGTERM says, once the example is classified."""
    proc = _child("pool-stopped")
    assert proc.returncode == -signal.SIGTERM, proc.stdout + proc.stderr
    assert _lines(proc) == [{"raising": True}], proc.stdout


@pytest.mark.parametrize("rank1", ["dead", "marked", "beating"])
def test_under_the_campaign_a_sigterm_in_flight_is_a_crash_only_if_a_rank_died(rank1):
    """fuzzdist run's handler over the pool's: its Terminated waits while the pool classifies the example.
    Rank 1 neither marked its SIGTERM nor beat: it died, the example is a RankCrash of rank 1 (Hypothesis saves
    it), and the next run raises Terminated.  Rank 1 marked (the job is being stopped) or beats (only rank 0
    was signalled): no crash, the first run raises Terminated.  Every verdict within VERDICT_S."""
    proc = _child("campaign-in-flight", rank1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [result] = _lines(proc)
    assert result["campaign_saw"] == "SIGTERM", result
    if rank1 == "dead":
        assert result["first"] == ["RankCrash", [1]] and result["second"] == ["Terminated", None], result
    else:
        assert result["first"] == ["Terminated", None], result
        assert result["second"][0] == "PoolGone", result  # the group was stopped: the pool is spent
    # SIGTERM after 1 s; the verdict, then (for the crash) where the survivors wait: generous bounds.
    assert result["first_s"] < 1.0 + VERDICT_S + 10, result


@pytest.mark.parametrize("main_thread", ["python", "blocked"])
def test_a_serving_rank_marks_its_sigterm_then_ends_as_sigterm_says(tmp_path, main_thread):
    """The mark is set by a thread of its own, so also while the main thread is blocked in C (in a collective);
    then the process ends: killed by SIGTERM where its handler can run, exit code 128+SIGTERM where it can't."""
    mark = tmp_path / "mark"
    proc = subprocess.Popen(
        [sys.executable, str(HELPERS / "signals_child.py"), "serving-rank", main_thread, str(mark)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(proc.stdout.readline()) == {"raising": True}
        time.sleep(0.2)  # into the sleep or the blocking lock
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert mark.read_text() == "fuzzdist/run/0/sigterm/1", err
    expected = -signal.SIGTERM if main_thread == "python" else 128 + signal.SIGTERM
    assert proc.returncode == expected, out + err
    assert "survived" not in out


class _Store:
    """The part of torchrun's store a Verdict reads: which keys exist; ``gone`` makes it fail as a closed store."""

    def __init__(self, keys=()):
        self.keys, self.gone = set(keys), False

    def check(self, keys):
        if self.gone:
            raise RuntimeError("Connection reset by peer")
        return all(k in self.keys for k in keys)


def test_a_verdict_names_only_the_ranks_that_neither_marked_nor_beat(monkeypatch):
    monkeypatch.setattr(torchrun_stop, "VERDICT_S", 0.3)
    beats = {1: 5, 2: 7, 3: 9}
    store = _Store({torchrun_stop.mark_key("p/", 2)})
    verdict = Verdict(store, "p/", [1, 2, 3], beats.__getitem__)
    assert verdict.dead([1, 2, 3]) is None  # 1 and 3 undecided, time left
    beats[3] += 1  # rank 3 beat: alive
    assert verdict.dead([1, 2, 3]) is None
    time.sleep(0.35)
    assert verdict.dead([1, 2, 3]) == {1}
    assert verdict.dead([2, 3]) == set()  # rank 1 answered meanwhile: nobody else is in question


def test_a_verdict_takes_nobody_for_dead_once_the_store_is_gone(monkeypatch):
    """torchrun's agent closing its store means the job is being stopped from above, not that a rank crashed."""
    monkeypatch.setattr(torchrun_stop, "VERDICT_S", 0.0)
    store = _Store()
    verdict = Verdict(store, "p/", [1], lambda r: 0)
    store.gone = True
    assert verdict.dead([1]) == set()


def test_an_interrupt_python_swallowed_in_a_weakref_callback_stops_the_next_example(below):
    """A handler's exception raised inside a weakref callback is swallowed by Python ("Exception ignored
    in ..."): a SIGTERM sent to `fuzzdist check-pg` that landed there once left it fuzzing for its whole
    duration.  The pool raises the swallowed interrupt at its next example, once."""
    import weakref

    from helpers.rank_fns import whoami

    from fuzzdist import RankPool
    from fuzzdist.errors import Terminated

    def raiser(signum, frame):
        raise Terminated(signal.Signals(signum).name)

    class Thing:
        pass

    with RankPool(2, timeout=20) as pool:
        pool.run(whoami)
        chained = ChainedHandler(signal.SIGTERM, raiser, ends_process=True)
        try:
            thing = Thing()
            ref = weakref.ref(thing, lambda _: signal.raise_signal(signal.SIGTERM))
            del thing  # the callback runs: the handler's Terminated is raised inside it and swallowed
            assert ref() is None
            with pytest.raises(Terminated):
                pool.run(whoami)
            assert pool.run(whoami) == [(0, 2, "cpu", "gloo"), (1, 2, "cpu", "gloo")]  # raised once; goes on
        finally:
            chained.remove()
