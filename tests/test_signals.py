"""Signal handlers compose: each chains to the handler it replaced, in either installation order.

Under ``torchrun -m fuzzdist run`` both the TorchrunPool and the campaign
handle SIGTERM; neither may silence the other (the end-to-end check is in
tests/test_torchrun.py).  The tests that could end the process with SIGTERM
run in a child process (tests/signals_child.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fuzzdist._signals import ChainedHandler

HERE = Path(__file__).resolve().parent


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
    for chained in (installed if remove_in_install_order else reversed(installed)):
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


def _child(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HERE / "signals_child.py"), mode], capture_output=True, text=True,
                          timeout=120)


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
