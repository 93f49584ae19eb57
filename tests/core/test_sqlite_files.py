"""A workspace's SQLite file that is not a database (damaged, or another file under its
name) stops start-up with one line naming the file and what to do, not a traceback; the
file is left as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shelfhand.core.db import connect
from shelfhand.core.errors import ConfigurationError


def test_a_file_that_is_not_a_database_is_named_with_what_to_do(tmp_path: Path) -> None:
    damaged = tmp_path / "usage.db"
    garbage = os.urandom(5000)
    damaged.write_bytes(garbage)
    with pytest.raises(ConfigurationError) as refused:
        connect(damaged)
    assert str(damaged) in str(refused.value) and "move it aside" in str(refused.value)
    assert damaged.read_bytes() == garbage  # nothing overwritten


@pytest.mark.parametrize("name", ["budgets.db", "usage.db", "sessions.db"])
def test_serve_on_a_workspace_with_a_damaged_file_says_so_in_one_line(
    tmp_path: Path, name: str
) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        "[budgets.user]\nmodel_calls_per_day = 2\n", encoding="utf-8"
    )
    (tmp_path / name).write_bytes(b"\x00garbage, not SQLite" * 300)
    out = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli.main", "serve", "-w", str(tmp_path),
         "--allow-anonymous", "--port", "0"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "SHELFHAND_EMBEDDER": "hashing"},
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert f"{name} is not a SQLite database" in out.stderr
