"""``shelfhand usage --json`` prints names in UTF-8, as every other ``--json`` does (it printed
``\\u79df...`` escapes for a Chinese tenant)."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run_cli


def test_usage_json_prints_a_chinese_tenant_in_utf8(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()

    out = run_cli(["usage", "--json", "--tenant", "租户甲", "-w", "ws"], ws, cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    assert "租户甲" in out.stdout and "\\u" not in out.stdout
    assert json.loads(out.stdout) == {"tenant": "租户甲", "usage": []}
