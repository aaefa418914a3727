"""Griffe extension: checks and renders the references fuzzdist's docstrings make.

The docstrings name objects with Sphinx roles (``:class:`~fuzzdist.errors.Hang```) and files with
paths (````fuzzdist/pool/remote.py````).  Markdown knows neither, and nothing else checks that the
name or the file still exists.  This extension, run by mkdocstrings over the whole package:

* resolves every role's target (absolute, relative to the package, or in the scope of the object
  the docstring documents) and warns when a ``fuzzdist`` name no longer exists;
* warns when a path written in code (````tests/test_x.py````, ````remote.py````) names no file;
* rewrites each role as code that links to the object where the site documents it, and reStructuredText's
  literal-block marker (``Example::``) as a plain colon: Markdown takes the indented block as code anyway.

``mkdocs build --strict`` turns each warning into an error, so a stale reference fails the build.
"""

from __future__ import annotations

import builtins
import importlib.util
import logging
import re
from pathlib import Path
from typing import Any

import griffe

REPO = Path(__file__).resolve().parents[2]
LITERAL_MARKER = re.compile(r"(\S)::$|^\s*::$", re.M)
ROLE = re.compile(r":(?:class|mod|func|attr|meth|data|exc|obj):`(~?)([^`<>]+)`")
# A file path in code: ``name.py`` or ``dir/name.py`` (also .md, .toml, .ini, .json, .yml).
FILE = re.compile(r"``([\w./-]+\.(?:py|md|toml|ini|json|yml))``")
# Roots of names that are not fuzzdist's: they are checked by their own projects.
FOREIGN = (
    "torch",
    "hypothesis",
    "pytest",
    "numpy",
    "cupy",
    "typing",
    "collections",
    "multiprocessing",
    "signal",
    "os",
    "sys",
    "logging",
    "threading",
    "pickle",
    "concurrent",
    "dataclasses",
    "enum",
    "subprocess",
)

# torch's own tests, which the property modules cite by name as what they generalise: not in this repository.
TORCH_TESTS = {
    "test_c10d_pypg.py",
    "test_c10d_spawn_gloo.py",
    "test_p2p_ipc.py",
    "test_cupy_as_tensor.py",
    "test_zero_redundancy_optimizer.py",
    "test_fully_shard_training.py",
    "test_parallelize_api.py",
    "test_tp_style.py",
    "test_schedule_multiproc.py",
}
# Where a path named in a docstring may be, besides the repository root and the module's own folder.
SEARCHED = ("fuzzdist", "tests", "properties", "bench", "docs")


def _installed_torch_root() -> Path | None:
    """The folder holding the installed ``torch`` package (found, not imported), or None without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent.parent


TORCH_ROOT = _installed_torch_root()

log = logging.getLogger("mkdocs.plugins.fuzzdist.docstring_references")


def _lookup(scope: griffe.Object | griffe.Alias, dotted: str) -> bool:
    """Whether ``dotted`` names a member reachable from ``scope``."""
    try:
        scope[dotted]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError, ValueError):
        return False
    return True


def _package_of(obj: griffe.Object) -> griffe.Module:
    """The package a relative module name (``._probe``) is relative to."""
    module = obj.module
    if module.is_init_module or module.parent is None:
        return module
    return module.parent  # type: ignore[return-value]


def resolve(obj: griffe.Object, target: str) -> str | None:
    """The full path of what ``target`` names in ``obj``'s docstring; "" for a foreign name; None if unknown."""
    target = target.strip().removesuffix("()")
    root = obj.package
    if target.startswith("."):
        package = _package_of(obj)
        return f"{package.path}{target}" if _lookup(package, target[1:]) else None
    first = target.split(".")[0]
    if first == root.name:
        rest = target[len(first) + 1 :]
        return target if not rest or _lookup(root, rest) else None
    if first in FOREIGN or (target.count(".") == 0 and hasattr(builtins, target)):
        return ""
    scope: griffe.Object | None = obj
    while scope is not None:
        if first in scope.members and _lookup(scope, target):
            return f"{scope.path}.{target}"
        scope = scope.parent
    return None


def _file_exists(obj: griffe.Object, path: str) -> bool:
    """Whether a path named in ``obj``'s docstring is a file: from the repository root, the module's folder,
    or the end of a path in the repository's own folders (``ops/allreduce.py``, ``worker.py``)."""
    if path in TORCH_TESTS or (REPO / path).is_file():
        return True
    # torch's own source, named as where it documents or does something: checked against the installed torch.
    if path.startswith("torch/") and TORCH_ROOT is not None:
        return (TORCH_ROOT / path).is_file()
    filepath = obj.module.filepath
    folder = Path(filepath[0] if isinstance(filepath, list) else filepath).parent
    if (folder / path).is_file():
        return True
    return any(
        candidate.as_posix().endswith("/" + path)
        for top in SEARCHED
        for candidate in (REPO / top).rglob(Path(path).name)
    )


class DocstringReferences(griffe.Extension):
    """Check every reference of every docstring in the package, and render roles as linked code."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Walk the package once it is loaded: every object's docstring, aliases skipped (only this repository's)."""
        if REPO in Path(str(pkg.filepath[0] if isinstance(pkg.filepath, list) else pkg.filepath)).parents:
            self._walk(pkg)

    def _walk(self, obj: griffe.Object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = self._rewrite(obj, obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member)  # type: ignore[arg-type]

    def _rewrite(self, obj: griffe.Object, text: str) -> str:
        where = f"{obj.relative_package_filepath}:{obj.docstring.lineno if obj.docstring else 0}"
        for path in FILE.findall(text):
            if not _file_exists(obj, path):
                log.warning("%s: the docstring of %s names %s, which is no file", where, obj.path, path)

        def render(match: re.Match[str]) -> str:
            short, target = match.group(1), match.group(2).strip()
            shown = target.rsplit(".", 1)[-1] if short else target
            full = resolve(obj, target)
            if full is None:
                log.warning("%s: the docstring of %s names %s, which does not exist", where, obj.path, target)
                return f"`{shown}`"
            if not full:
                return f"`{shown}`"
            return f'<autoref identifier="{full}" optional><code>{shown}</code></autoref>'

        text = LITERAL_MARKER.sub(lambda m: f"{m.group(1)}:" if m.group(1) else "", text)
        return ROLE.sub(render, text)
