"""Whole-file writes: readable as a plain `open(..., "w")` would leave them."""

from __future__ import annotations

import os
import stat

from cdmpp.atomic import write_text_atomic


def test_written_file_has_the_mode_of_a_plain_write(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "sub" / "out.json", "{}\n")
        (tmp_path / "plain.json").write_text("{}\n")
    finally:
        os.umask(old)
    assert path.read_text() == "{}\n"
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["out.json"]  # no temp file left
