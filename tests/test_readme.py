"""README's examples run as written: a user's reuse of a library property from the installed package."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_block(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"README should have exactly one python block containing {marker!r}"
    return found[0]


def test_reusing_the_ddp_property_on_your_own_group(pytester):
    """The "Reusing a property" example: DDP parity over a user's ProcessGroup, world sizes 2 and 3."""
    block = _python_block("# my_groups.py")
    groups, test = block.split("# tests/test_my_group.py")
    pytester.makepyfile(my_groups=groups, test_my_group=test)
    result = pytester.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=ci")
    result.assert_outcomes(passed=2)
