"""No known-bug predicate reads a message fuzzdist wrote: they match the fields of
:class:`~fuzzdist.problems.Problem` records and the example's types, and read what torch itself said only
through :mod:`fuzzdist.known_bugs.evidence` (``says``), so rewording a message can't change what is KNOWN.
An AST scan of every module that registers known bugs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fuzzdist.known_bugs.entries import ENTRY_MODULES

REPO = Path(__file__).resolve().parents[2]
# every module that registers known bugs, and what predicates share
PREDICATE_MODULES = [name.replace(".", "/") + ".py" for name in sorted(ENTRY_MODULES)] + [
    "fuzzdist/known_bugs/predicates.py"
]

# reading text: a message, a traceback, a stack, a record's words, a failure's raw results
TEXT_ATTRIBUTES = {
    "args",
    "__str__",
    "__repr__",
    "error_text",
    "trace",
    "detail",
    "hint",
    "tracebacks",
    "stacks",
    "straggler_stacks",
    "last_output",
    "exceptions",
    "results",
    "message",
    "exc_types",
}
TEXT_METHODS = {
    "startswith",
    "endswith",
    "find",
    "rfind",
    "index",
    "search",
    "match",
    "fullmatch",
    "findall",
    "split",
    "splitlines",
    "partition",
    "lower",
    "upper",
    "strip",
    "format",
    "removeprefix",
}
TEXT_CALLS = {"str", "repr", "format"}


def text_reads(source: str) -> list[str]:
    """Where ``source`` reads text: the ``re`` module, ``str()``/``repr()``, a string method, an attribute that
    holds words, or an ``in`` test of a string constant."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import) and any(a.name == "re" for a in node.names):
            found.append(f"{line}: imports re")
        elif isinstance(node, ast.ImportFrom) and node.module == "re":
            found.append(f"{line}: imports from re")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in TEXT_CALLS:
            found.append(f"{line}: calls {node.func.id}()")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TEXT_METHODS:
            found.append(f"{line}: calls .{node.func.attr}()")
        elif isinstance(node, ast.Attribute) and node.attr in TEXT_ATTRIBUTES:
            found.append(f"{line}: reads .{node.attr}")
        elif (
            isinstance(node, ast.Compare)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            and (_is_text_constant(node.left))
        ):
            found.append(f"{line}: tests a string constant with `in`")
    return found


def _is_text_constant(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


# The DTensor-operators family's predicates still read their failures' text: to be rewritten onto Problem fields.
_STILL_READING_TEXT: set[str] = set()


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason="predicates still read text"))
        if p in _STILL_READING_TEXT
        else p
        for p in PREDICATE_MODULES
    ],
)
def test_no_known_bug_predicate_reads_a_message(path):
    found = text_reads((REPO / path).read_text(encoding="utf-8"))
    assert not found, f"{path} reads text; match a Problem's fields or use evidence.says:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "import re",
        "from re import search",
        "ok = 'gloo' in str(failure)",
        "ok = failure.args[0]",
        "ok = 'x' in problem.detail",
        "ok = problem.what.startswith('grad')",
        "ok = any(e for e in failure.exceptions.values())",
        "ok = f'{x}' in y",
        "ok = failure.tracebacks[0]",
    ],
)
def test_the_scan_finds_each_way_of_reading_text(source):
    assert text_reads(source)


def test_the_scan_lets_fields_types_and_evidence_through():
    source = (
        "ok = problem.symptom is Symptom.MEMORY_ORDER and call.op in _REDUCING and 0 in shape\n"
        "ok = evidence.says(problem, 'negative padding') and isinstance(case, Case) and p.what == 'output'\n"
    )
    assert text_reads(source) == []
