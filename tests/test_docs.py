"""The manual and the package indexes hold together, and the site's build code does what it says.

- Every subpackage's index (its ``__init__`` docstring) and docs/architecture.md's folder table name
  every module in it, so that neither can go stale as modules come and go.
- mkdocs.yml's nav lists every page of docs/, and the API reference renders every public name.
- The site's hook rewrites links from the repository's layout to the site's, and refuses links
  outside docs/; its docstring extension resolves references and reports the stale ones.
  (Those tests need the ``docs`` extra, which CI installs; ``mkdocs build --strict`` runs in CI.)
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import fuzzdist

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fuzzdist"
DOCS = REPO / "docs"
SITE_CODE = DOCS / "_site"


def _subpackages() -> list[Path]:
    """Every package folder under fuzzdist/, fuzzdist itself excluded (its docstring is the public API)."""
    return sorted(init.parent for init in PACKAGE.rglob("__init__.py") if init.parent != PACKAGE)


def _contents(package: Path) -> list[str]:
    """The modules (``name.py``) and subpackages (``name/``) of a package folder."""
    modules = [f"{p.name}" for p in package.glob("*.py") if p.name != "__init__.py"]
    packages = [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + packages)


def _names(text: str, entry: str) -> bool:
    """Whether ``text`` names the module or subpackage ``entry`` (``runner.py``, ``rank/``) as code or a path."""
    stem = entry.removesuffix(".py").removesuffix("/")
    return bool(
        re.search(rf"(?<![\w.]){re.escape(entry)}", text)
        or re.search(rf"``{re.escape(stem)}``", text)
        or re.search(rf":mod:`[~\w.]*\.{re.escape(stem)}`", text)
    )


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""


@pytest.mark.parametrize("package", _subpackages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_package_index_names_every_module(package):
    missing = [entry for entry in _contents(package) if not _names(_docstring(package), entry)]
    assert not missing, (
        f"the docstring of {package.relative_to(REPO)}/__init__.py does not name {missing}: "
        "add each to its list of modules (as name.py, or name/ for a subpackage)"
    )


def _architecture_rows() -> dict[str, str]:
    """docs/architecture.md's folder table: the folder (``fuzzdist/pool/``) -> the row."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    table = text.split("## Folder by folder", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for row in re.findall(r"^\| `(fuzzdist/[\w/]+/)` \|(.*)$", table, re.M):
        rows[row[0]] = row[1]
    return rows


def _table_packages() -> list[Path]:
    """The subpackages docs/architecture.md's folder table has a row for: all but the property families
    (``fuzzdist/properties/<family>/``), which the ``properties/`` row names and their own index describes."""
    return [p for p in _subpackages() if p.parent != PACKAGE / "properties"]


@pytest.mark.parametrize("package", _table_packages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_architecture_table_names_every_module(package):
    folder = package.relative_to(REPO).as_posix() + "/"
    rows = _architecture_rows()
    assert folder in rows, f"docs/architecture.md's folder table has no row for `{folder}`"
    missing = [entry for entry in _contents(package) if not _names(rows[folder], entry)]
    assert not missing, f"docs/architecture.md's row for `{folder}` does not name {missing}"


def test_module_name_check_tells_names_from_prose():
    """A word in prose is not a module named: ``report`` must appear as code or a path."""
    assert _names("runner.py does this", "runner.py")
    assert _names("see ``runner``", "runner.py")
    assert _names("see :mod:`~fuzzdist.campaign.runner`", "runner.py")
    assert _names("in rank/", "rank/")
    assert not _names("the JSON report and the summary", "report.py")
    assert not _names("html_report.py only", "report.py")


def _nav_pages() -> set[str]:
    text = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text.split("\nnav:\n", 1)[1]
    return set(re.findall(r":\s*([\w./-]+\.md)\s*$", nav, re.M))


def test_nav_lists_every_page():
    """The site's nav has every page in docs/ (the findings' own pages are the findings index's)."""
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    pages = {p for p in pages if not p.startswith(("findings/", "_site/"))}
    missing = sorted(pages - _nav_pages())
    assert not missing, f"mkdocs.yml's nav does not list {missing}"


def test_api_reference_renders_every_public_name():
    """``fuzzdist.__all__`` is rendered from the docstrings (``::: fuzzdist.NAME``), not retyped."""
    reference = "\n".join(p.read_text(encoding="utf-8") for p in (DOCS / "reference").glob("*.md"))
    rendered = set(re.findall(r"^::: ([\w.]+)", reference, re.M))
    # A name is rendered by its own block, or by its module's (fuzzdist.errors renders the error family).
    missing = [
        name
        for name in fuzzdist.__all__
        if f"fuzzdist.{name}" not in rendered and getattr(getattr(fuzzdist, name), "__module__", None) not in rendered
    ]
    assert not missing, f"docs/reference/ renders neither `::: fuzzdist.NAME` nor its module for {missing}"
    for module in (
        "fuzzdist.errors",
        "fuzzdist.strategies",
        "fuzzdist.known_bugs",
        "fuzzdist.conformance",
        "fuzzdist.toolkit.checks",
        "fuzzdist.toolkit.oracle",
    ):
        assert module in rendered, f"docs/reference/ does not render {module}"


def test_api_page_retypes_no_signature():
    """docs/api.md explains; the signatures come from the code, in the generated reference."""
    headings = re.findall(r"^#+ .*", (DOCS / "api.md").read_text(encoding="utf-8"), re.M)
    retyped = [h for h in headings if re.search(r"`fuzzdist\.\w+\(", h)]
    assert not retyped, f"docs/api.md retypes signatures in {retyped}: link the reference instead"


def _load(name: str):
    """Import one of the site's build modules (they need the ``docs`` extra)."""
    spec = importlib.util.spec_from_file_location(f"fuzzdist_site_{name}", SITE_CODE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_links_are_rewritten_for_the_site():
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    hook = _load("outside_pages")
    assert hook.site_target("../bench/RESULTS.md#a", "hangs.md") == "bench/RESULTS.md#a"
    assert hook.site_target("docs/hangs.md", "readme.md") == "hangs.md"
    assert hook.site_target("../docs/hangs.md#x", "bench/RESULTS.md") == "../hangs.md#x"
    assert hook.site_target("../README.md", "index.md") == "readme.md"
    assert hook.site_target("https://example.org/a.md", "index.md") is None
    assert hook.site_target("#local", "index.md") is None


def test_a_link_outside_docs_is_reported(caplog):
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    hook = _load("outside_pages")
    with caplog.at_level(logging.WARNING):
        assert hook.site_target("../fuzzdist/errors.py", "api.md") is None
    assert "outside docs/" in caplog.text and "fuzzdist/errors.py" in caplog.text


def test_pseudo_references_are_escaped():
    """``[dist][sharded_tensor]`` in prose stays text; a defined reference and code stay as they are."""
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    hook = _load("outside_pages")

    page = SimpleNamespace(file=SimpleNamespace(src_uri="findings.md"))  # what the hook reads of mkdocs' Page
    markdown = '"[dist][sharded_tensor] x", `[a][b]`, [c][d]\n\n[d]: https://e.org\n'
    out = hook.on_page_markdown(markdown, page, None, None)
    assert r"\[dist\]\[sharded_tensor\]" in out
    assert "`[a][b]`" in out and "[c][d]" in out


def _griffe_package():
    griffe = pytest.importorskip("griffe", reason="the docs extra: pip install -e '.[docs]'")
    extension = _load("docstring_references")
    return griffe.load("fuzzdist", search_paths=[str(REPO)]), extension


def test_docstring_references_resolve():
    package, extension = _griffe_package()
    known_bugs = package["known_bugs"]
    assert extension.resolve(known_bugs, "KnownBug") == "fuzzdist.known_bugs.KnownBug"
    assert extension.resolve(package["conformance"], "._probe") == "fuzzdist.conformance._probe"
    assert extension.resolve(package["errors"], "fuzzdist.errors.Hang") == "fuzzdist.errors.Hang"
    assert extension.resolve(package["errors"], "torch.chunk") == ""
    assert extension.resolve(package["errors"], "AssertionError") == ""
    assert extension.resolve(package["errors"], "fuzzdist.errors.NoSuchError") is None
    assert extension.resolve(package["campaign"]["progress"], "update") is None


def test_stale_docstring_references_are_reported(caplog):
    package, extension = _griffe_package()
    obj = package["errors"]
    with caplog.at_level(logging.WARNING):
        out = extension.DocstringReferences()._rewrite(
            obj, "See :class:`~fuzzdist.errors.Gone` and ``_remote.py``; :class:`~fuzzdist.errors.Hang`."
        )
    assert "fuzzdist.errors.Gone, which does not exist" in caplog.text
    assert "_remote.py, which is no file" in caplog.text
    assert '<autoref identifier="fuzzdist.errors.Hang" optional><code>Hang</code></autoref>' in out


def test_site_warnings_fail_the_ci_build():
    """The build code warns through mkdocs' loggers, which --strict counts, and CI keeps them on.

    mkdocs counts only records of loggers under ``mkdocs``, and ``--quiet`` drops warnings before
    they are counted: with it, ``mkdocs build --strict`` passed over a stale reference.
    """
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("griffe", reason="the docs extra: pip install -e '.[docs]'")
    for name in ("outside_pages", "docstring_references"):
        assert _load(name).log.name.startswith("mkdocs."), f"docs/_site/{name}.py must log under mkdocs"
    build = [
        line
        for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if "mkdocs build" in line and not line.lstrip().startswith("#")
    ]
    assert len(build) == 1 and "--strict" in build[0], ".ci/run should build the docs with --strict"
    assert not re.search(r"\s(--quiet|-q)\b", build[0]), ".ci/run's docs build must not be --quiet"
