"""Which collected tests a ``fuzzdist`` command runs.

Targets are paths (files or directories), ``file::test`` ids (with or
without the ``[cpu-w2]`` parameter id) and bare property names
(``test_broadcast_reaches_every_rank``, or without its ``test_`` prefix),
looked up in the default suite directory.  Pytest collects the paths and
the files of ids; :class:`SelectionPlugin` then keeps the Hypothesis tests
that match, on the requested device, and turns a target that matches
nothing into a one-line error instead of pytest's "not found".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fuzzdist.errors import TargetError

DEFAULT_SUITE = "properties"


@dataclass
class Targets:
    paths: list[Path] = field(default_factory=list)  # plain path targets: everything under them
    ids: list[tuple[str, Path, str]] = field(default_factory=list)  # (as given, file, "test[...]")
    names: list[str] = field(default_factory=list)  # bare property names
    suite: Path | None = None  # where bare names are looked up

    def collect_args(self) -> list[str]:
        """What pytest is told to collect."""
        args: list[str] = []
        for path in [*self.paths, *(file for _, file, _ in self.ids), *([self.suite] if self.names else [])]:
            text = str(path)
            if text not in args:
                args.append(text)
        return args


def resolve_targets(args: list[str], suite: str = DEFAULT_SUITE) -> Targets:
    """Sort the command line's targets into paths, ids and names; check the paths exist."""
    targets = Targets()
    if not args:
        if not Path(suite).is_dir():
            raise TargetError(
                f"no {suite}/ directory here: run fuzzdist from the project root, "
                "or name property files or directories to run"
            )
        targets.paths.append(Path(suite))
        return targets
    for arg in args:
        if "::" in arg:
            file, rest = arg.split("::", 1)
            if not Path(file).is_file():
                raise TargetError(f"no such file: {file} (in {arg}); give an existing file::test id")
            targets.ids.append((arg, Path(file), rest))
        elif Path(arg).exists():
            targets.paths.append(Path(arg))
        elif os.sep in arg or "/" in arg or arg.endswith(".py"):
            raise TargetError(f"no such file or directory: {arg}")
        else:
            targets.names.append(arg)
    if targets.names:
        if not Path(suite).is_dir():
            raise TargetError(
                f"can't look up property {targets.names[0]!r}: no {suite}/ directory here; "
                "run from the project root or give its file::test id"
            )
        targets.suite = Path(suite)
    return targets


def pool_device(item: pytest.Item) -> str | None:
    """The device of the item's rank_pool parameter (a PoolKey), or None."""
    callspec = getattr(item, "callspec", None)
    key = callspec.params.get("rank_pool") if callspec is not None else None
    return getattr(key, "device", None)


def is_hypothesis_test(item: pytest.Item) -> bool:
    return isinstance(item, pytest.Function) and hasattr(getattr(item, "obj", None), "hypothesis")


class SelectionPlugin:
    """Keeps the selected Hypothesis tests; records what went wrong for the CLI to report."""

    def __init__(self, targets: Targets, device: str | None = None) -> None:
        self.targets = targets
        self.device = device
        self.error: str | None = None  # a one-line usage error, set during collection
        self.collect_errors: list[tuple[str, str]] = []  # (node id, error text)
        self.selected: list[pytest.Item] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append((report.nodeid or "collection", str(report.longreprtext)))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        matched_ids: set[str] = set()
        matched_names: set[str] = set()
        kept, dropped = [], []
        for item in items:
            if self._matches(item, matched_ids, matched_names):
                kept.append(item)
            else:
                dropped.append(item)
        self.error = self._unmatched(items, matched_ids, matched_names)
        if self.error is None:
            properties = [item for item in kept if is_hypothesis_test(item)]
            if not properties:
                self.error = (
                    f"nothing to run: {self._describe()} holds no Hypothesis property (a test decorated with @given)"
                )
            elif self.device is not None:
                on_device = [i for i in properties if pool_device(i) in (None, self.device)]
                if not on_device:
                    devices = sorted({d for d in map(pool_device, properties) if d is not None})
                    self.error = (
                        f"nothing to run on --device {self.device}: the selected properties run "
                        f"on {', '.join(devices)}; pass --device {devices[0]}"
                    )
                properties = on_device
            kept = properties if self.error is None else []
        kept_ids = {id(item) for item in kept}
        dropped = [item for item in items if id(item) not in kept_ids]
        items[:] = kept
        self.selected = list(kept)
        if dropped:
            config.hook.pytest_deselected(items=dropped)

    def _matches(self, item: pytest.Item, matched_ids: set[str], matched_names: set[str]) -> bool:
        path = Path(item.path).resolve()
        for target in self.targets.paths:
            target = target.resolve()
            if path == target or target in path.parents:
                return True
        rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
        for given, file, wanted in self.targets.ids:
            if path == file.resolve() and (
                rest == wanted or rest.startswith(wanted + "[") or rest.startswith(wanted + "::")
            ):
                matched_ids.add(given)
                return True
        original = getattr(item, "originalname", item.name)
        for name in self.targets.names:
            if name in (original, item.name) or original == f"test_{name}":
                matched_names.add(name)
                return True
        return False

    def _unmatched(self, items: list[pytest.Item], matched_ids: set[str], matched_names: set[str]) -> str | None:
        if self.collect_errors:
            return None  # the CLI reports the import error itself
        for given, file, wanted in self.targets.ids:
            if given not in matched_ids:
                here = sorted(
                    {getattr(i, "originalname", i.name) for i in items if Path(i.path).resolve() == file.resolve()}
                )
                known = f"; properties there: {', '.join(here)}" if here else f"; {file} defines no test"
                return f"no property {wanted!r} in {file}{known}"
        for name in self.targets.names:
            if name not in matched_names:
                suite = self.targets.suite
                here = sorted(
                    {
                        getattr(i, "originalname", i.name)
                        for i in items
                        if suite is not None
                        and suite.resolve() in Path(i.path).resolve().parents
                        and is_hypothesis_test(i)
                    }
                )
                hint = ", ".join(here[:12]) + (", ..." if len(here) > 12 else "")
                return (
                    f"unknown property {name!r}: no test of that name in {suite}/; "
                    f"give a file, a file::test id, or one of: {hint or '(none found)'}"
                )
        return None

    def _describe(self) -> str:
        parts = [str(p) for p in self.targets.paths] + [g for g, _, _ in self.targets.ids] + self.targets.names
        return ", ".join(parts) or "the selection"
