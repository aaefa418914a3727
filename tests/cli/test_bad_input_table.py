"""docs/campaigns.md's bad-input table names every option of every ``fuzzdist`` command."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from fuzzdist.cli import build_parser

CAMPAIGNS = Path(__file__).resolve().parents[2] / "docs" / "campaigns.md"


def _table() -> str:
    text = CAMPAIGNS.read_text(encoding="utf-8")
    start = text.index("### Bad input, option by option")
    return text[start : text.index("\n## ", start)]


def test_the_bad_input_table_covers_every_option_of_every_command():
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    rows = {}  # command -> the table's text for it
    for line in _table().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3:
            for command in re.findall(r"[a-z-]+", cells[0]):
                rows[command] = rows.get(command, "") + " " + cells[1]
    missing = []
    for name, sub in commands.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                if option.startswith("--no-") and f"--[no-]{option[5:]}" in rows.get(name, ""):
                    continue
                if option not in re.findall(r"(?<![\w-])-{1,2}[\w-]+", rows.get(name, "").replace("[no-]", "")):
                    missing.append(f"{name} {option}")
    assert not missing, f"docs/campaigns.md's bad-input table lacks {missing}: add a row saying what is refused"
