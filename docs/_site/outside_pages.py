"""MkDocs hook: brings the repository's pages that live outside docs/ into the site, and keeps links working.

README.md and bench/RESULTS.md are read on the repository as much as on the site, so they stay where
they are.  This hook adds them to the site (``OUTSIDE``) and rewrites every relative link of every page
from the repository's layout to the site's: ``../bench/RESULTS.md`` in docs/hangs.md becomes
``bench/RESULTS.md``, ``docs/hangs.md`` in README.md becomes ``hangs.md``.  A link to any other file
outside docs/ (a source file, a test) is reported, and ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[2]
DOCS = "docs/"

# repository path -> the page's path in the site
OUTSIDE = {"README.md": "readme.md", "bench/RESULTS.md": "bench/RESULTS.md"}

# ``[dist][sharded_tensor]`` in prose (a quoted pull-request title) is no link on the repository, but
# mkdocs-autorefs would take it for a cross-reference to an object named ``sharded_tensor``.
PSEUDO_REFERENCE = re.compile(r"(?<![\\!])\[([^\]\n]+)\]\[([^\]\n.]+)\]")
CODE_SPAN = re.compile(r"(`+[^`]*?`+)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"(^```.*?^```)", re.S | re.M)
URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:")

log = logging.getLogger("mkdocs.hooks.outside_pages")


def on_files(files: Files, config) -> Files:
    """Add the pages of ``OUTSIDE`` to the site, read from their place in the repository."""
    for repo_path, site_path in OUTSIDE.items():
        files.append(File.generated(config, site_path, abs_src_path=str(REPO / repo_path)))
    return files


def repository_path(site_path: str) -> str:
    """Where a page of the site lives in the repository."""
    for repo_path, outside_site_path in OUTSIDE.items():
        if outside_site_path == site_path:
            return repo_path
    return DOCS + site_path


def site_target(target: str, page_site_path: str) -> str | None:
    """A relative link of a page, written for the repository, rewritten for the site (None: leave it)."""
    if URL.match(target) or target.startswith(("#", "/")):
        return None
    path, hash_mark, fragment = target.partition("#")
    page_repo_path = repository_path(page_site_path)
    repo_target = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), path))
    if repo_target.startswith(DOCS):
        site = repo_target[len(DOCS) :]
    elif repo_target in OUTSIDE:
        site = OUTSIDE[repo_target]
    else:
        log.warning(
            "%s links to %s, outside docs/: name it as text (`%s`), or add it to OUTSIDE in %s",
            page_repo_path,
            repo_target,
            repo_target,
            Path(__file__).relative_to(REPO),
        )
        return None
    relative = posixpath.relpath(site, posixpath.dirname(page_site_path) or ".")
    return relative + hash_mark + fragment


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    """Rewrite the page's relative links, outside fenced code, from the repository's layout to the site's."""
    page_site_path = page.file.src_uri

    def rewrite(match: re.Match[str]) -> str:
        new = site_target(match.group(1), page_site_path)
        return match.group(0) if new is None else f"]({new})"

    defined = set(re.findall(r"^\[([^\]]+)\]:", markdown, re.M))

    def escape(match: re.Match[str]) -> str:
        if match.group(2) in defined:
            return match.group(0)
        return rf"\[{match.group(1)}\]\[{match.group(2)}\]"

    def prose(text: str) -> str:
        # CODE_SPAN.split keeps the code spans at the odd indexes.
        spans = CODE_SPAN.split(text)
        return "".join(s if i % 2 else PSEUDO_REFERENCE.sub(escape, s) for i, s in enumerate(spans))

    parts = FENCE.split(markdown)
    # FENCE.split keeps the fenced blocks at the odd indexes: leave those alone.
    return "".join(part if i % 2 else prose(LINK.sub(rewrite, part)) for i, part in enumerate(parts))
