"""The catalogue of findings (fuzzdist/known_bugs/catalogue.toml): read and checked, the one source the
registry fills known bugs from, and the source of the generated parts of the findings pages."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fuzzdist import known_bugs
from fuzzdist.errors import InvalidArgument
from fuzzdist.known_bugs import catalogue, catalogue_pages
from fuzzdist.known_bugs.catalogue import CatalogueError, parse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

registry = importlib.import_module("fuzzdist.known_bugs.registry")  # the package's registry() hides the module
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

ENTRY = """
versions = ["2.6.0+cu124", "2.13.0+cpu"]

[findings.test-only-catalogued]
kind = "crash"
title = "a planted crash"
summary = "a planted crash, as a KNOWN line says it"
documentation = "silent"
upstream = "https://example.invalid/1"
relation = "none found: new"
matrix = { "2.6.0+cu124" = "FIXED", "2.13.0+cpu" = "BUG" }
"""


def _predicate(example, failure) -> bool:
    return False


# -- the file ------------------------------------------------------------------------------------


def test_the_shipped_catalogue_is_in_its_canonical_form() -> None:
    """What run_matrix.py --update writes (dump) is the file as committed: an update changes only cells."""
    text = catalogue.PATH.read_text(encoding="utf-8")
    assert catalogue.dump(parse(text)) == text


def test_the_catalogue_is_package_data() -> None:
    """An installed fuzzdist (not only a checkout) can read it: pyproject ships it."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "catalogue.toml" in pyproject["tool"]["setuptools"]["package-data"]["fuzzdist.known_bugs"]


def test_seen_on_is_where_the_matrix_says_bug() -> None:
    finding = parse(ENTRY).findings["test-only-catalogued"]
    assert finding.seen_on == ("2.13",)
    assert finding.reproducer == "docs/findings/test-only-catalogued/repro.py"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (('kind = "crash"', 'kind = "bug"'), "kind 'bug'"),
        (('title = "a planted crash"\n', ""), "lacks title"),
        (('summary = "a planted crash, as a KNOWN line says it"\n', ""), "lacks summary"),
        (('documentation = "silent"', 'documentation = "silent"\ncolour = "red"'), "unknown fields ['colour']"),
        (('"2.13.0+cpu" = "BUG"', '"2.14.1" = "BUG"'), "needs one cell for each of versions"),
        (('versions = ["2.6.0+cu124", "2.13.0+cpu"]', ""), "versions = "),
        (("[findings.test-only-catalogued]", "[findings.test-only-catalogued"), "not valid TOML"),
    ],
)
def test_a_malformed_entry_names_what_to_fix(change: tuple[str, str], said: str) -> None:
    assert change[0] in ENTRY
    with pytest.raises(CatalogueError, match=None) as caught:
        parse(ENTRY.replace(*change))
    assert said in str(caught.value)


def test_an_unregistered_finding_needs_no_summary_but_says_why() -> None:
    text = ENTRY.replace(
        'summary = "a planted crash, as a KNOWN line says it"', 'unregistered = "no property draws it"'
    )
    finding = parse(text).findings["test-only-catalogued"]
    assert finding.unregistered == "no property draws it" and finding.summary == ""
    assert parse(text).by_known_bug("test-only-catalogued") is None


def test_a_matrix_update_writes_cells_and_adds_a_new_version() -> None:
    updated = catalogue.with_matrix(
        parse(ENTRY), {("test-only-catalogued", "2.13.0+cpu"): "FIXED", ("test-only-catalogued", "2.15.0"): "BUG"}
    )
    assert updated.versions == ("2.6.0+cu124", "2.13.0+cpu", "2.15.0")
    assert dict(updated.findings["test-only-catalogued"].matrix) == {
        "2.6.0+cu124": "FIXED",
        "2.13.0+cpu": "FIXED",
        "2.15.0": "BUG",
    }
    assert parse(catalogue.dump(updated)) == updated


# -- the registry fills known bugs from it -------------------------------------------------------


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalogue holds ENTRY only, and the registry is restored after the test."""
    monkeypatch.setattr(catalogue, "_loaded", parse(ENTRY))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


@pytest.mark.usefixtures("planted")
def test_register_fills_what_an_entry_leaves_out() -> None:
    bug = registry.register(registry.KnownBug(id="test-only-catalogued", where=("test-prop",), recognise=_predicate))
    assert (bug.summary, bug.kind, bug.upstream, bug.seen_on, bug.reproducer) == (
        "a planted crash, as a KNOWN line says it",
        "crash",
        "https://example.invalid/1",
        ("2.13",),
        "docs/findings/test-only-catalogued/repro.py",
    )
    assert registry._REGISTRY["test-only-catalogued"] is bug


@pytest.mark.usefixtures("planted")
def test_an_entry_that_repeats_the_catalogue_is_accepted() -> None:
    """What the entries give today, before their duplicated arguments go: the same values, a seen_on
    that is part of the matrix's, the reproducer's single-file path of before the findings had folders."""
    bug = registry.register(
        registry.KnownBug(
            id="test-only-catalogued",
            summary="a planted crash, as a KNOWN line says it",
            where=("test-prop",),
            recognise=_predicate,
            seen_on=("2.13",),
            upstream="https://example.invalid/1",
            kind="crash",
            reproducer="docs/findings/test-only-catalogued.py",
        )
    )
    assert bug.reproducer == "docs/findings/test-only-catalogued/repro.py"


@pytest.mark.usefixtures("planted")
@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"summary": "another summary"}, "summary='another summary' where the catalogue says"),
        ({"kind": "hang"}, "kind='hang' where the catalogue says 'crash'"),
        ({"upstream": "https://example.invalid/2"}, "upstream='https://example.invalid/2'"),
        ({"seen_on": ("2.6",)}, "seen_on=('2.6',) where the catalogue's matrix shows it on ('2.13',) only"),
        (
            {"reproducer": "docs/findings/another-finding/repro.py"},
            "reproducer='docs/findings/another-finding/repro.py'",
        ),
    ],
)
def test_an_entry_that_contradicts_the_catalogue_is_refused(given: dict, said: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        registry.register(
            registry.KnownBug(id="test-only-catalogued", where=("test-prop",), recognise=_predicate, **given)
        )
    message = str(caught.value)
    assert said in message and "[findings.test-only-catalogued]" in message and "Leave those arguments out" in message
    assert "test-only-catalogued" not in registry._REGISTRY


@pytest.mark.usefixtures("planted")
def test_a_bug_outside_the_catalogue_gives_its_own_summary_and_versions() -> None:
    with pytest.raises(InvalidArgument, match=r"no entry in fuzzdist's catalogue .*give its summary= and seen_on="):
        registry.register(registry.KnownBug(id="test-only-elsewhere", where=("test-prop",), recognise=_predicate))
    bug = registry.register(
        registry.KnownBug(
            id="test-only-elsewhere",
            summary="a user's own",
            where=("test-prop",),
            recognise=_predicate,
            seen_on=("2.13",),
        )
    )
    assert bug.kind == "wrong result" and bug.reproducer is None


# -- the registry and the catalogue name the same bugs ---------------------------------------------


def _fuzzdist_entries() -> list[known_bugs.KnownBug]:
    """fuzzdist's own entries: a test file may register planted ones in this process."""
    return [
        bug
        for bug in known_bugs.registry().values()
        if getattr(bug.recognise, "__module__", "").startswith("fuzzdist.")
    ]


def test_every_registered_bug_has_a_catalogue_entry() -> None:
    entries = _fuzzdist_entries()
    assert entries
    written = catalogue.load()
    for bug in entries:
        finding = written.by_known_bug(bug.id)
        assert finding is not None, f"known bug {bug.id!r} has no entry in {catalogue.PATH.name}: add one"
        assert bug.reproducer == finding.reproducer and (ROOT / finding.reproducer).is_file()


def test_every_catalogue_entry_is_registered_or_says_why_not() -> None:
    registered = {bug.id for bug in _fuzzdist_entries()}
    for finding in catalogue.load().findings.values():
        if finding.unregistered:
            assert finding.known_bug not in registered, f"{finding.id} is registered: drop its 'unregistered'"
        else:
            assert finding.known_bug in registered, (
                f"no code registers {finding.id}'s known bug "
                f"{finding.known_bug!r}: register it, or say why in "
                "'unregistered'"
            )


# -- the generated parts of the pages --------------------------------------------------------------


def test_the_committed_pages_are_what_the_catalogue_generates() -> None:
    stale = catalogue_pages.stale_pages(DOCS, catalogue.load())
    assert stale == [], f"run `python -m fuzzdist.known_bugs.catalogue_pages --write`: stale {stale}"


def _docs_copy(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "findings", docs / "findings", ignore=shutil.ignore_patterns("*.py"))
    shutil.copy(DOCS / "findings.md", docs / "findings.md")
    return docs


def test_a_changed_cell_makes_its_pages_stale_and_write_fixes_them(tmp_path: Path) -> None:
    docs = _docs_copy(tmp_path)
    written = catalogue.load()
    finding = next(iter(written.findings))
    changed = catalogue.with_matrix(written, {(finding, written.versions[0]): "no verdict"})
    stale = catalogue_pages.stale_pages(docs, changed, write=True)
    assert sorted(stale) == sorted(
        str(docs / page) for page in (catalogue_pages.INDEX, catalogue_pages.VERSIONS, f"findings/{finding}/README.md")
    )
    assert catalogue_pages.stale_pages(docs, changed) == []
    readme = (docs / "findings" / finding / "README.md").read_text(encoding="utf-8")
    assert f"torch {written.versions[0]}: no verdict" in readme


def test_a_page_without_its_markers_is_named(tmp_path: Path) -> None:
    docs = _docs_copy(tmp_path)
    (docs / "findings.md").write_text("# Findings\n\nno generated part\n", encoding="utf-8")
    with pytest.raises(catalogue_pages.PageError, match="findings.md needs one generated part"):
        catalogue_pages.stale_pages(docs, catalogue.load())


def _pages(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fuzzdist.known_bugs.catalogue_pages", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_check_command_passes_on_the_committed_pages_and_fails_on_stale_ones(tmp_path: Path) -> None:
    assert _pages("--check").returncode == 0
    docs = _docs_copy(tmp_path)
    readme = docs / "findings" / "gloo-bool-sum-stores-2" / "README.md"
    readme.write_text(
        readme.read_text(encoding="utf-8").replace("- **Class:** wrong result", "- **Class:** crash"), encoding="utf-8"
    )
    done = _pages("--check", "--docs", str(docs))
    assert done.returncode == 1 and str(readme) in done.stderr and "--write" in done.stderr


def test_the_command_refuses_a_folder_without_the_pages(tmp_path: Path) -> None:
    done = _pages("--check", "--docs", str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert "findings.md doesn't exist: run this from the repository root, or give --docs" in done.stderr
