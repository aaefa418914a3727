"""Report files are written whole and readable like any file the user writes (mkstemp's 0600 is not kept)."""

from __future__ import annotations

import os
import stat

from fuzzdist.campaign.report import write_text_atomic


def test_a_report_gets_the_mode_a_plain_open_would_give(tmp_path):
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "report.json", "{}")
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "report.json").stat().st_mode)
    assert mode == stat.S_IMODE(plain.stat().st_mode) == 0o644
    assert (tmp_path / "report.json").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
