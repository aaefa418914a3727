"""check-pg's factory: a module that can't be imported, whatever the reason, is one line naming it and exit 2;
a factory that raises on the ranks shows its traceback once."""

from __future__ import annotations

import sys

import pytest

from fuzzdist.cli import main
from fuzzdist.conformance import FactoryError, check_process_group
from fuzzdist.conformance._report import ConformanceReport

MODULES = {
    "fz_syntax_error": ("def f(:\n", "does not compile: invalid syntax", "fz_syntax_error.py, line 1"),
    "fz_raises_on_import": (
        'raise RuntimeError("boom at import")\n',
        "raised on import: RuntimeError: boom at import",
        "python -c 'import fz_raises_on_import'",
    ),
    "fz_keyerror_on_import": ("{}['x']\n", "raised on import: KeyError: 'x'", None),
}


@pytest.fixture
def modules(tmp_path, monkeypatch):
    for name, (source, _, _) in MODULES.items():
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in MODULES:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("name", [n for n, (_, message, _) in MODULES.items() if message])
def test_a_factory_module_that_fails_to_import_is_one_line_and_exit_2(modules, capsys, name):
    _, message, where = MODULES[name]
    with pytest.raises(FactoryError, match="raised on import|does not compile"):
        check_process_group(f"{name}:f")
    assert main(["check-pg", f"{name}:f", "-w", "1", "--max-examples", "1"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("fuzzdist check-pg: error: module "), err
    assert f"'{name}'" in err and message in err and (where is None or where in err), err
    assert "Traceback" not in out + err


def test_the_summary_shows_a_factory_traceback_once():
    message = (
        "the factory raised while building the group:\nranks 0 raised (rank 0: RuntimeError: boom)\n\n"
        "--- rank 0 traceback ---\nTraceback (most recent call last):\nRuntimeError: boom"
    )
    report = ConformanceReport("m:f", (2,), factory_errors={2: message})
    text = report.summary()
    assert text.count("Traceback (most recent call last)") == 1, text
    assert "factory failed at world size 2: the factory raised while building the group:" in text
