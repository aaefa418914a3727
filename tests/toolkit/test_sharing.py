"""Shared memory a process still holds after an example: a leak lasts, a moment's hold is not one."""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch

from fuzzdist.toolkit.sharing import leftover_shared_memory, shared_memory_in_use

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm (Linux)")


def _share_and_return(hold: list) -> None:
    """A function whose frame another thread grabs while its local shared tensor is alive."""
    tensor = torch.ones(4).share_memory_()  # noqa: F841 - kept alive only by this frame
    hold.append(sys._current_frames()[threading.get_ident()])


def test_a_frame_held_for_a_moment_by_another_thread_is_not_a_leak():
    # The pool reads a running example's frames from another thread (to explain hangs); a frame held when
    # its function returns keeps its locals, and so their shared memory, until that thread lets go.
    with _strategy("file_system"):
        baseline = shared_memory_in_use()
        hold: list = []
        _share_and_return(hold)
        assert leftover_shared_memory(baseline, mapped_wait_s=0) - baseline  # the held frame maps it still
        threading.Timer(0.05, hold.clear).start()  # the reading thread lets go a moment later
        assert leftover_shared_memory(baseline) == frozenset()


def test_memory_still_held_after_the_wait_is_a_leak():
    with _strategy("file_system"):
        baseline = shared_memory_in_use()
        kept = torch.ones(4).share_memory_()
        start = time.monotonic()
        leaked = leftover_shared_memory(baseline, mapped_wait_s=0.1)
        assert leaked and time.monotonic() - start < 1.0  # a mapped segment waits mapped_wait_s, not wait_s
        del kept


class _strategy:
    """Switch torch.multiprocessing's sharing strategy for a block."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.before = torch.multiprocessing.get_sharing_strategy()
        torch.multiprocessing.set_sharing_strategy(self.name)

    def __exit__(self, *exc: object) -> None:
        torch.multiprocessing.set_sharing_strategy(self.before)
