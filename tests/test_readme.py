"""README is a landing page whose commands and example work as written, and the manual in docs/ holds together.

- README's quick start has the two commands, character for character; README stays a landing page
  (under 80 lines) that links every page of the manual.
- README's example property compiles and passes on a rank pool, and is the one the manual and the
  tutorial show; the tutorial's planted bug is found and shrunk as the tutorial says;
  docs/writing-properties.md's "Reusing a property" example runs the library's DDP property over a
  user's group.
- Every relative link in README, the manual's pages and bench/RESULTS.md reaches a file, and every
  #fragment a heading of that file (or an object the API reference renders, ``::: NAME``).
- None of them talks about this project's tracker or history: no issue numbers, commit hashes,
  ``git worktree`` recipes or "stop N".
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

# The manual moved out of README: these pages are README's and must stay free of project history.
MANUAL = [
    "docs/index.md",
    "docs/first-property.md",
    "docs/campaigns.md",
    "docs/writing-properties.md",
    "docs/api.md",
    "docs/pytest-plugin.md",
    "docs/hangs.md",
    "docs/known-bugs.md",
    "docs/properties.md",
    "docs/architecture.md",
    "docs/check-pg.md",
    "docs/testing.md",
    "docs/security.md",
]
PAGES = ["README.md", *MANUAL, "bench/RESULTS.md"]

QUICK_START = [
    'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e ".[test]" && .venv/bin/fuzzdist run --duration 5m',
    'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e ".[test]" && .venv/bin/python -m pytest tests/',
]
README_MAX_LINES = 80


def _text(page: str) -> str:
    return (REPO / page).read_text(encoding="utf-8")


def _python_block(page: str, marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", _text(page), re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"{page} should have exactly one python block containing {marker!r}"
    return found[0]


def test_quick_start_commands_unchanged():
    """Both commands, as indented code lines, exactly as CI and users copy them."""
    lines = README.read_text(encoding="utf-8").splitlines()
    for command in QUICK_START:
        assert f"    {command}" in lines, f"README's quick start lost or changed the command {command!r}"


def test_readme_is_a_landing_page():
    count = len(README.read_text(encoding="utf-8").splitlines())
    assert count <= README_MAX_LINES, f"README has {count} lines; move detail to docs/ (limit {README_MAX_LINES})"


def test_readme_links_every_manual_page():
    text = README.read_text(encoding="utf-8")
    missing = [page for page in MANUAL if f"]({page})" not in text]
    assert not missing, f"README does not link {missing}"
    assert "](docs/gpu-run.md)" in text and "never run on a GPU" in text, "README should keep its GPU status line"


def test_property_table_names_existing_files():
    """docs/properties.md's table of the suite names files that are in properties/."""
    rows = re.findall(r"^\| `(test_[a-z0-9_]+\.py)[`:]", _text("docs/properties.md"), re.M)
    assert rows, "docs/properties.md should have the property suite's table"
    missing = [name for name in rows if not (REPO / "properties" / name).is_file()]
    assert not missing, f"docs/properties.md's property table names files not in properties/: {missing}"


def test_readme_example_property_compiles():
    compile(_python_block("README.md", "def test_broadcast("), "README.md", "exec")


@pytest.mark.parametrize("page", ["docs/writing-properties.md", "docs/first-property.md"])
def test_readme_example_is_the_manuals(page):
    """README shows the example of the manual and the tutorial, not a copy drifting apart from them."""
    marker = "def test_broadcast("
    assert _python_block("README.md", marker) == _python_block(page, marker)


def test_readme_example_property_passes(pytester):
    """The "Writing a property" example, verbatim, on a 2-rank CPU pool (its cuda variant skips without a GPU)."""
    block = _python_block("README.md", "def test_broadcast(")
    for module in re.findall(r"^from (fuzzdist[\w.]*) import", block, re.M):
        package = module.split(".")[1] if "." in module else None
        if package and importlib.util.find_spec(f"fuzzdist.{package}") is None:
            # README names the regrouped package layout; until that lands here, the example can't import.
            pytest.skip(f"README's example imports {module}, and fuzzdist.{package} is not in this checkout yet")
    pytester.makepyfile(test_readme_example=block)
    result = pytester.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=ci")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 1, result.stdout.str()
    assert not outcomes.get("failed") and not outcomes.get("errors"), result.stdout.str()


def test_tutorial_planted_bug_is_found_and_shrunk(pytester):
    """docs/first-property.md's "Break it": the planted bug fails the example, shrunk to four elements."""
    tutorial = _text("docs/first-property.md")
    bug = [b for b in re.findall(r"```python\n(.*?)```", tutorial, re.S) if "planted bug" in b]
    assert len(bug) == 1, "docs/first-property.md should have one python block with the planted bug"
    broadcast_line = "    dist.broadcast(tensor, src, group=ctx.group)\n"
    assert bug[0].startswith(broadcast_line), "the planted bug should follow the example's broadcast line"
    block = _python_block("README.md", "def test_broadcast(")
    pytester.makepyfile(test_broken=block.replace(broadcast_line, bug[0]))
    result = pytester.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=ci")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1, result.stdout.str()
    for shown in ("spec=TensorSpec((4,), torch.float32)", "1 of 4 elements differ; first at flat index 3: got 0.0"):
        assert shown in tutorial, f"the tutorial should show {shown!r}"
        assert shown in result.stdout.str(), result.stdout.str()


def test_reusing_the_ddp_property_on_your_own_group(pytester):
    """The "Reusing a property" example: DDP parity over a user's ProcessGroup, world sizes 2 and 3."""
    block = _python_block("docs/writing-properties.md", "# my_groups.py")
    groups, test = block.split("# tests/test_my_group.py")
    pytester.makepyfile(my_groups=groups, test_my_group=test)
    result = pytester.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=ci")
    result.assert_outcomes(passed=2)


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    # An object the API reference renders is a heading of the site, named by its path.
    anchors = set(re.findall(r"^::: ([\w.]+)", text, re.M))
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


@pytest.mark.parametrize("page", PAGES)
def test_links_resolve(page):
    source = REPO / page
    text = re.sub(r"```.*?```", "", source.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path_part, _, fragment = target.partition("#")
        path = (source.parent / path_part).resolve() if path_part else source
        if not path.exists():
            broken.append(f"{target} (no such file)")
        elif fragment and path.suffix == ".md" and fragment not in _anchors(path):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page} has broken links: {broken}"


def _prose(text: str) -> str:
    """The text without fenced or inline code (where a fuzzdist message's "all_reduce #2" is no issue number)."""
    return re.sub(r"`[^`]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


@pytest.mark.parametrize("page", PAGES)
def test_no_project_history(page):
    """Users read these pages: nothing about this project's tracker, commits or working sessions."""
    text = _text(page)
    problems = []
    problems += re.findall(r"\bissues? #?\d+", _prose(text), re.I)
    problems += re.findall(r"(?<![\w&/])#\d+\b", _prose(text))
    problems += re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", text)
    problems += re.findall(r"\bworktree\b", text, re.I)
    problems += re.findall(r"\bstop \d+\b", text, re.I)
    assert not problems, f"{page} mentions project history: {problems}"
