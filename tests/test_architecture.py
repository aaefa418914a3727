"""The package's shape: fuzzdist's layers import downwards only, no import cycles, nothing reaches properties/
by path.

The graph counts every ``import``/``from`` statement, at module level and
inside functions alike (a cycle through a lazy import is still a cycle a
reader has to untangle).  ``from package import name`` where ``name`` is a
submodule counts as importing that submodule.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fuzzdist"


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {_module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name a (possibly relative) ``from`` statement in ``module`` names."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The fuzzdist modules ``module`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
            # the package itself only when a name is taken from its __init__, not just a submodule
            names = submodules + ([base] if len(submodules) < len(node.names) else [])
        else:
            continue
        for name in names:
            # ``import fuzzdist.a.b`` runs fuzzdist.a.b (its parents too, but they are its own business).
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module name -> the fuzzdist modules it imports (of the fuzzdist package at ``package``)."""
    modules = _modules(package)
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle in ``graph`` as ``[a, b, ..., a]``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    for root in sorted(graph):
        if state.get(root):
            continue
        path = [root]
        stack = [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(child) == 1:
                return path[path.index(child) :] + [child]
            if not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append(iter(sorted(graph.get(child, ()))))
    return None


def test_the_graph_sees_relative_function_level_and_submodule_imports(tmp_path):
    assert _resolve("fuzzdist.campaign.runner", False, 1, "database") == "fuzzdist.campaign.database"
    assert _resolve("fuzzdist.campaign", True, 2, None) == "fuzzdist"
    graph = import_graph()
    assert "fuzzdist.campaign.runner" in graph["fuzzdist.cli.run"]  # imported inside a function
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_fuzzdist_has_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def _package(module: str) -> str:
    """The top-level subpackage a module belongs to: ``fuzzdist.pool.rank.worker`` -> ``fuzzdist.pool``."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Top-level subpackage -> the subpackages its modules import.  The root ``fuzzdist`` (the public
    facade, which re-exports from every layer) is left out."""
    packages: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if module == "fuzzdist":
            continue
        source = _package(module)
        packages.setdefault(source, set()).update(
            _package(target) for target in imported if target != "fuzzdist" and _package(target) != source
        )
    return packages


# fuzzdist's layers, lowest first: a subpackage (or top-level module) imports only from the layers below
# its own, never from one above it nor from one beside it in its layer.  The root ``fuzzdist``, the public
# facade that re-exports from every layer, stands above them all.  docs/architecture.md tells the same order.
LAYERS: list[set[str]] = [
    {"problems"},  # what a check found wrong, as data: a leaf
    {"errors", "compat", "fresh_interpreter"},  # errors carry problems; the others import nothing of fuzzdist
    {"known_bugs", "strategies"},
    {"pool"},  # the driver side and the rank side (pool/rank/)
    {"toolkit", "driver"},  # toolkit's ReorderingProcessGroup registers with the rank's state (pool.rank)
    {"properties"},
    {"conformance", "campaign"},
    {"cli"},
    {"__main__"},
]


def layer_violations(graph: dict[str, set[str]], layers: list[set[str]] = LAYERS) -> list[str]:
    """Each import in ``graph`` (module -> the modules it imports) that goes up or sideways between
    ``layers``, and each subpackage that is in no layer, as one line naming the importing module."""
    level = {f"fuzzdist.{name}": i for i, layer in enumerate(layers) for name in layer}
    found = set()
    for module, imported in graph.items():
        if module == "fuzzdist":
            continue
        source = _package(module)
        if source not in level:
            found.add(
                f"{source} is in no layer: place it in LAYERS (tests/test_architecture.py) and in docs/architecture.md"
            )
            continue
        for target in imported:
            upper = _package(target)
            if target == "fuzzdist" or upper == source or upper not in level:
                continue  # the facade; its own package; a package in no layer is reported as a source
            if level[upper] > level[source]:
                found.add(f"{module} (layer {level[source]}) imports {target} from a layer above it ({level[upper]})")
            elif level[upper] == level[source]:
                found.add(f"{module} imports {target} from beside it (both in layer {level[source]})")
    return sorted(found)


def test_known_bugs_reach_the_families_only_through_the_one_list():
    """``fuzzdist.known_bugs`` sits below the families, yet collects their entries: by name, through
    ``entries.ENTRY_MODULES``, imported lazily.  That list names exactly the ``known_bugs`` modules in the tree,
    each in a family package or check-pg, and no module of ``fuzzdist.known_bugs`` imports a family."""
    from fuzzdist.known_bugs.entries import ENTRY_MODULES

    modules = _modules()
    in_tree = sorted(name for name in modules if name.endswith(".known_bugs") and name != "fuzzdist.known_bugs")
    assert sorted(ENTRY_MODULES) == in_tree
    # each serves its own family's check (check-pg's: check-pg's, and the functional property's gloo kernels)
    assert all(
        name.split(".")[-2] in serves or name.startswith("fuzzdist.conformance.")
        for name, serves in ENTRY_MODULES.items()
    )
    assert all(name.startswith(("fuzzdist.properties.", "fuzzdist.conformance.")) for name in ENTRY_MODULES)
    graph = import_graph()
    above = [
        f"{m} imports {t}"
        for m in graph
        if _package(m) == "fuzzdist.known_bugs"
        for t in graph[m]
        if _package(t) in ("fuzzdist.properties", "fuzzdist.conformance")
    ]
    assert not above, "\n".join(above)
    loaders = [
        m
        for m, path in modules.items()
        if _package(m) == "fuzzdist.known_bugs" and "importlib" in path.read_text(encoding="utf-8")
    ]
    assert loaders == ["fuzzdist.known_bugs.entries"]


def test_subpackages_import_each_other_one_way():
    """No package-level back edge (``pool`` importing ``driver`` while ``driver`` imports ``pool``)."""
    assert find_cycle({"a": {"b"}, "b": {"a"}}) is not None
    cycle = find_cycle(package_graph(import_graph()))
    assert cycle is None, "subpackages import each other both ways: " + " -> ".join(cycle)


def test_each_layer_imports_only_the_layers_below_it():
    """The order of LAYERS holds for every import, at module level or inside a function: a lower layer
    never imports a higher one, so the folders tell the layers truly."""
    violations = layer_violations(import_graph())
    assert not violations, "\n".join(violations)


def documented_layers() -> list[set[str]]:
    """The layers as docs/architecture.md's table lists them: row ``| n | `a/`, `b.py` (...) | ... |``."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if re.match(r"\|\s*\d+\s*\|", line)]
    return [{name.removesuffix(".py").rstrip("/") for name in re.findall(r"`([^`]+)`", row[2])} for row in rows]


def test_the_documented_layers_are_the_tested_ones():
    assert documented_layers() == LAYERS, "docs/architecture.md's layer table and LAYERS differ"


def _plant(package: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")


def test_a_planted_upward_import_is_caught_where_no_cycle_is(tmp_path):
    """An upward import with no way back makes no cycle: only the order catches it.  So does an import
    between two packages of one layer, and a subpackage nobody placed."""
    package = tmp_path / "fuzzdist"
    _plant(
        package,
        {
            "__init__.py": "",
            "errors.py": "",
            "pool/__init__.py": "from fuzzdist import errors\n",
            "pool/local.py": "def start():\n    from fuzzdist.cli import run  # planted: pool reaching up to cli\n",
            "cli/__init__.py": "",
            "cli/run.py": "from fuzzdist.pool import local\n",
            "toolkit/__init__.py": "",
            "toolkit/reorder.py": "import fuzzdist.driver.plugin  # planted: sideways\n",
            "driver/__init__.py": "",
            "driver/plugin.py": "",
            "gadgets/__init__.py": "from fuzzdist.errors import *\n",
        },
    )
    graph = import_graph(package)
    assert find_cycle(package_graph(graph)) is not None  # pool <-> cli: the cycle test sees this one ...
    (package / "cli" / "run.py").write_text("", encoding="utf-8")
    graph = import_graph(package)
    assert find_cycle(package_graph(graph)) is None  # ... but not this one
    assert layer_violations(graph) == [
        "fuzzdist.gadgets is in no layer: place it in LAYERS (tests/test_architecture.py) and in docs/architecture.md",
        "fuzzdist.pool.local (layer 3) imports fuzzdist.cli.run from a layer above it (7)",
        "fuzzdist.toolkit.reorder imports fuzzdist.driver.plugin from beside it (both in layer 4)",
    ]


def _private_imports_across_packages() -> list[str]:
    """``a imports b._x`` lines where b's subpackage is not a's and ``_x`` is private."""
    modules = _modules()
    found = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(module, is_package, node.level, node.module)
                targets = [
                    (f"{base}.{a.name}", None) if f"{base}.{a.name}" in modules else (base, a.name) for a in node.names
                ]
            elif isinstance(node, ast.Import):
                targets = [(alias.name, None) for alias in node.names]
            else:
                continue
            for target, name in targets:
                if not target.startswith("fuzzdist.") or _package(target) == _package(module):
                    continue
                if any(part.startswith("_") for part in target.split(".")[1:]) or (name or "").startswith("_"):
                    found.append(f"{module} imports {target}{'.' + name if name else ''}")
    return sorted(set(found))


def test_no_private_imports_across_subpackages():
    """A ``_private`` module or name is its subpackage's business: other subpackages use its public
    surface (what its ``__init__`` or a public module exports)."""
    offenders = _private_imports_across_packages()
    assert not offenders, "\n".join(offenders)


_SYS_PATH_WITH_PROPERTIES = re.compile(r"sys\.path.*properties|properties.*sys\.path")  # on one line
_SYS_PATH_CHANGE = re.compile(r"sys\.path\.(insert|append|extend)\(|sys\.path\[[^]]*\]\s*=|sys\.path\s*\+?=")
_PROPERTIES_LITERAL = re.compile(r"""["']properties/?["']""")
_PROPERTY_TEST_IMPORT = re.compile(r"^\s*(from|import)\s+(properties\.)?test_\w+", re.MULTILINE)
_MODULE_NAME_LITERAL = re.compile(r"""["'](?:properties\.)?(test_\w+)["']""")  # import_module("test_x")


def test_nothing_reaches_properties_by_path_or_test_module_name():
    property_tests = {path.stem for path in (REPO / "properties").glob("test_*.py")}
    offenders = []
    for root in ("fuzzdist", "tests"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            text = path.read_text(encoding="utf-8")
            if _SYS_PATH_WITH_PROPERTIES.search(text) or (
                _SYS_PATH_CHANGE.search(text) and _PROPERTIES_LITERAL.search(text)
            ):
                offenders.append(f"{path.relative_to(REPO)}: puts properties/ on sys.path")
            for match in _PROPERTY_TEST_IMPORT.finditer(text):
                name = match.group(0).split()[-1].removeprefix("properties.")
                if name in property_tests:
                    offenders.append(f"{path.relative_to(REPO)}: imports the property test module {name}")
            for match in _MODULE_NAME_LITERAL.finditer(text):
                if match.group(1) in property_tests:
                    offenders.append(f"{path.relative_to(REPO)}: names the property test module {match.group(1)}")
    assert not offenders, "\n".join(offenders)


# The public API (README's "API" table): every name these modules export has a docstring.
PUBLIC_MODULES = [
    "fuzzdist",
    "fuzzdist.pool",
    "fuzzdist.pool.torchrun",
    "fuzzdist.strategies",
    "fuzzdist.conformance",
    "fuzzdist.conformance.ops",
    "fuzzdist.properties",
    "fuzzdist.toolkit.checks",
    "fuzzdist.toolkit.sharing",
    "fuzzdist.toolkit.cuda_ipc",
    "fuzzdist.pool.capabilities",
    "fuzzdist.driver.newhooks",
    "fuzzdist.errors",
    "fuzzdist.pool.capabilities.gloo",
    "fuzzdist.pool.capabilities.gpu",
    "fuzzdist.pool.capabilities.torch_features",
    "fuzzdist.pool.capabilities.pool_args",
    "fuzzdist.pool.capabilities.backends",
    "fuzzdist.toolkit.reorder",
    "fuzzdist.pool.rank.context",
    "fuzzdist.driver.profiles",
    "fuzzdist.known_bugs",
]


def _public_names(module):
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        n
        for n in vars(module)
        if not n.startswith("_") and getattr(getattr(module, n), "__module__", None) == module.__name__
    ]


def test_every_public_name_has_a_docstring():
    import importlib
    import inspect
    import pkgutil

    import fuzzdist.properties

    modules = PUBLIC_MODULES + [
        f"fuzzdist.properties.{info.name}" for info in pkgutil.iter_modules(fuzzdist.properties.__path__)
    ]
    missing = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:  # a property family the installed torch can't support
            continue
        if not (module.__doc__ or "").strip():
            missing.append(name)
        for public in _public_names(module):
            obj = getattr(module, public)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not (obj.__doc__ or "").strip():
                missing.append(f"{name}.{public}")
    assert not missing, "public names without a docstring:\n" + "\n".join(missing)
