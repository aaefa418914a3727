"""Strings from outside, shown as plain text.

A node id read from a shared database, an example drawn from bytes someone
else wrote, a field of a report made elsewhere: fuzzdist prints and writes
them, but must never let them drive the terminal (escape sequences that set
its title, erase lines or fake output) nor break an output's encoding (a lone
surrogate, which is what Python makes of a non-UTF-8 byte in a path or an
argument, can't be written as UTF-8).
"""

from __future__ import annotations

import re

# C0 controls but newline and tab (multi-line text keeps its lines), DEL, C1 controls (0x9b is a
# one-byte CSI on some terminals), and the bidirectional overrides that reorder what a line shows.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group(0)
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def plain(text: str) -> str:
    """``text`` with every control character (newlines and tabs aside) and every lone surrogate written
    as a Python-style escape (``\\x1b``, ``\\udcff``): safe to print on a terminal and to encode as UTF-8."""
    return _SURROGATE.sub(_escaped, _CONTROL.sub(_escaped, text))


def one_line(text: str) -> str:
    """:func:`plain`, with newlines and tabs escaped too: a value shown inside one line (a node id) can't
    start a line of its own."""
    return re.sub("[\n\t]", _escaped, plain(text))


def encodable(text: str) -> str:
    """``text`` with each lone surrogate written as ``\\udcff``, so that it encodes as UTF-8; the rest as is
    (for outputs that escape in their own way, such as HTML)."""
    return _SURROGATE.sub(_escaped, text)
