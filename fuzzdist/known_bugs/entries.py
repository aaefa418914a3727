"""Where the known bugs are registered: next to what they are about, one module per family, collected here
through one explicit list, imported by name the first time the registry is read.

A family's ``known_bugs`` module imports its family's case classes (so a predicate can ask ``isinstance``);
the family imports :mod:`fuzzdist.known_bugs` to run its checks inside ``known_failures``.  Naming the modules
here, instead of importing them, keeps that one-way: ``tests/test_architecture.py`` checks that this list is
the only way :mod:`fuzzdist.known_bugs` reaches the families, and that it names every ``known_bugs`` module.
"""

from __future__ import annotations

import importlib

ENTRY_MODULES: dict[str, tuple[str, ...]] = {
    "fuzzdist.conformance.known_bugs": ("check-pg", "functional"),
    "fuzzdist.properties.broadcast.known_bugs": ("broadcast",),
    "fuzzdist.properties.checkpoint.known_bugs": ("checkpoint",),
    "fuzzdist.properties.collectives.known_bugs": ("collectives",),
    "fuzzdist.properties.comm_hooks.known_bugs": ("comm_hooks",),
    "fuzzdist.properties.compile.known_bugs": ("compile",),
    "fuzzdist.properties.dtensor.known_bugs": ("dtensor",),
    "fuzzdist.properties.dtensor_ops.known_bugs": ("dtensor_ops",),
    "fuzzdist.properties.elastic.known_bugs": ("elastic",),
    "fuzzdist.properties.fsdp1.known_bugs": ("fsdp1",),
    "fuzzdist.properties.functional.known_bugs": ("functional",),
    "fuzzdist.properties.join.known_bugs": ("join",),
    "fuzzdist.properties.local_map.known_bugs": ("local_map",),
    "fuzzdist.properties.object_collectives.known_bugs": ("object_collectives",),
    "fuzzdist.properties.p2p.known_bugs": ("p2p",),
    "fuzzdist.properties.pipelining.known_bugs": ("pipelining",),
    "fuzzdist.properties.reshard.known_bugs": ("reshard",),
    "fuzzdist.properties.sharded_tensor.known_bugs": ("sharded_tensor",),
    "fuzzdist.properties.subgroups.known_bugs": ("subgroups",),
    "fuzzdist.properties.tensor_parallel.known_bugs": ("tensor_parallel",),
}
"""Every module that registers known bugs, by name, with the checks whose failures its entries explain (a
property module's name, ``check-pg`` for every ``check-pg:<collective>``): a failure of a check loads only the
modules that can explain it, so a test's failure doesn't import every property family."""

unavailable: dict[str, str] = {}
"""Entry modules whose family the installed torch can't run (the family refuses to import, saying why): their
bugs can't be met, so they are not registered."""

_loaded: set[str] = set()


def load(where: str | None = None) -> None:
    """Import, once each, the entry modules that serve check ``where`` (every one where None); each registers
    its bugs on import."""
    family = None if where is None else where.split(":", 1)[0]
    for name, serves in ENTRY_MODULES.items():
        if name in _loaded or (family is not None and family not in serves):
            continue
        _loaded.add(name)  # first: the module's family imports fuzzdist.known_bugs, which may ask again
        try:
            importlib.import_module(name)
        except ImportError as exc:  # a family this torch lacks (its own ImportError names the torch)
            if exc.name is not None and exc.name.startswith("fuzzdist"):
                raise  # a fuzzdist module missing: a bug here, not torch's
            unavailable[name] = str(exc)
