"""What a pool's ranks support, probed on them once per pool and kept with it."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from fuzzdist.errors import CapabilityError

T = TypeVar("T")

# pool -> probe key -> the probe's answer, or the CapabilityError it raised.  Kept per pool object (a
# pool restarted after a crash keeps its answers: same torch, same backend), gone with the pool.
_POOL_ANSWERS: weakref.WeakKeyDictionary[Any, dict[Hashable, Any]] = weakref.WeakKeyDictionary()


def probed_once(pool: Any, key: Hashable, probe: Callable[[], T]) -> T:
    """``probe()``'s answer for ``pool`` and ``key``, computed on the first call and then kept.

    For what only the ranks can tell (which dtypes and ops the installed backend takes): ``probe``
    usually runs a probe function on the pool's ranks.  A :class:`~fuzzdist.errors.CapabilityError` it
    raises is kept too and raised again on every call: the pytest plugin turns it into a skip of the
    calling test, with its message as the reason."""
    answers = _POOL_ANSWERS.setdefault(pool, {})
    if key not in answers:
        try:
            answers[key] = probe()
        except CapabilityError as exc:
            answers[key] = exc
    answer = answers[key]
    if isinstance(answer, CapabilityError):
        raise answer
    return answer
