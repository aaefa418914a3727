"""Each rank-pool variant's own example-database key, and the key its variants shared before.

The plugin gives every rank-pool variant of a property (``[cpu-w2]``,
``[cpu-w3]``, ``[cuda-w2]``) its own Hypothesis database key: the node id
mixed into the test's digest, as Hypothesis's pytest plugin does for a
``parametrize`` marker.  Before that, all the variants of a property saved
their examples under one *shared key*, the test's plain digest.

Databases written that way stay readable.  When a variant's own key holds
nothing, the examples under the shared key are replayed for it: plain pytest
and ``fuzzdist run`` :func:`adopt` them (copy them to the variant's key, and
note that they did, so it happens once per variant and database), and
``fuzzdist replay``, which only reads, replays them from the shared key
(:func:`fallback`).  The shared key is never emptied: the other variants
need its examples too.
"""

from __future__ import annotations

import pytest
from hypothesis.database import ExampleDatabase

from fuzzdist.compat import hypothesis_internals as hc
from fuzzdist.compat.pytest_internals import has_parametrized_fixture

# Under ``key + ADOPTED``: the shared keys whose examples the variant keyed ``key`` adopted.  Without
# it, a variant whose adopted examples pass (and are deleted from its key by Hypothesis) would adopt
# them again on every run.
ADOPTED = b".fuzzdist.adopted-shared-key"
# The corpora Hypothesis replays from: the minimal failing examples, and the other failing ones.
_CORPORA = (b"", b".secondary")


def parametrized_by_pool(item: pytest.Item) -> bool:
    """Whether ``item`` is one of several rank-pool variants of a test (``[cpu-w2]``, ``[cuda-w3]``...)."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "rank_pool" in callspec.params


def keyed_by_hypothesis(item: pytest.Function) -> bool:
    """Whether Hypothesis's pytest plugin mixes the node id into ``item``'s key itself: a test with a
    ``parametrize`` marker or a parametrized fixture."""
    return item.get_closest_marker("parametrize") is not None or has_parametrized_fixture(item)


def shared_key(item: pytest.Function) -> bytes | None:
    """The key all the rank-pool variants of ``item`` shared before each had its own; None where that
    key was already ``item``'s own (not a pool variant, or keyed by node id by Hypothesis)."""
    inner = getattr(getattr(item.obj, "hypothesis", None), "inner_test", None)
    if inner is None or not parametrized_by_pool(item) or keyed_by_hypothesis(item):
        return None
    return hc.digest_with(inner, None)


def fallback(db: ExampleDatabase, key: bytes, shared: bytes | None) -> list[bytes]:
    """The examples stored under ``shared`` that the variant keyed ``key`` replays: all of them when
    ``key`` holds nothing and has not adopted ``shared`` before, else none."""
    if shared is None or shared == key:
        return []
    if any(next(iter(db.fetch(key + corpus)), None) is not None for corpus in _CORPORA):
        return []
    if shared in set(db.fetch(key + ADOPTED)):
        return []
    return list(db.fetch(shared))


def adopt(item: pytest.Function, db: ExampleDatabase | None, key: bytes) -> str | None:
    """Copy the examples of ``item``'s shared key to ``key`` (its own) where :func:`fallback` says so.

    Returns a line saying what happened, or None if nothing was copied.
    """
    shared = shared_key(item)
    if db is None or shared is None or not fallback(db, key, shared):
        return None
    copied = 0
    for corpus in _CORPORA:
        for entry in list(db.fetch(shared + corpus)):
            db.save(key + corpus, entry)
            copied += 1
    db.save(key + ADOPTED, shared)
    return (
        f"{item.nodeid}: its own database key held nothing; replaying the {copied} example(s) stored "
        f"under the key its pool variants shared before each had its own ({shared.hex()}), copied to "
        "its own key (the shared key keeps them for the other variants)"
    )
