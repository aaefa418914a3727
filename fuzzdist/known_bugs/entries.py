"""Where the known bugs are registered: next to what they are about, one module per family, collected here
through one explicit list, imported by name the first time the registry is read.

A family's ``known_bugs`` module imports its family's case classes (so a predicate can ask ``isinstance``);
the family imports :mod:`fuzzdist.known_bugs` to run its checks inside ``known_failures``.  Naming the modules
here, instead of importing them, keeps that one-way: ``tests/test_architecture.py`` checks that this list is
the only way :mod:`fuzzdist.known_bugs` reaches the families, and that it names every ``known_bugs`` module.
"""

from __future__ import annotations

import importlib

ENTRY_MODULES = (
    "fuzzdist.conformance.known_bugs",
    "fuzzdist.properties.broadcast.known_bugs",
    "fuzzdist.properties.checkpoint.known_bugs",
    "fuzzdist.properties.collectives.known_bugs",
    "fuzzdist.properties.comm_hooks.known_bugs",
    "fuzzdist.properties.dtensor.known_bugs",
    "fuzzdist.properties.dtensor_ops.known_bugs",
    "fuzzdist.properties.functional.known_bugs",
    "fuzzdist.properties.join.known_bugs",
    "fuzzdist.properties.object_collectives.known_bugs",
    "fuzzdist.properties.p2p.known_bugs",
    "fuzzdist.properties.pipelining.known_bugs",
    "fuzzdist.properties.sharded_tensor.known_bugs",
    "fuzzdist.properties.subgroups.known_bugs",
    "fuzzdist.properties.tensor_parallel.known_bugs",
)
"""Every module that registers known bugs, by name."""

unavailable: dict[str, str] = {}
"""Entry modules whose family the installed torch can't run (the family refuses to import, saying why): their
bugs can't be met, so they are not registered."""

_loaded = False


def load() -> None:
    """Import every entry module once (each registers its bugs on import)."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # first: an entry module's family imports fuzzdist.known_bugs, which may ask again
    for name in ENTRY_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # a family this torch lacks (its own ImportError names the torch)
            if exc.name is not None and exc.name.startswith("fuzzdist"):
                raise  # a fuzzdist module missing: a bug here, not torch's
            unavailable[name] = str(exc)
