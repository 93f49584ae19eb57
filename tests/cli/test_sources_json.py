"""``shelfhand sources --json``: the table's rows as a JSON list, one object per source, for
scripts (Chinese names as UTF-8, as ``search --json`` prints them)."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run_cli


def test_sources_json_lists_each_source_with_the_tables_fields(tmp_path: Path) -> None:
    docs = tmp_path / "资料"
    (docs / "hr").mkdir(parents=True)
    (docs / "退货政策.md").write_text("# 退货\n\n拆封后七天内可退货。\n", encoding="utf-8")
    (docs / "hr" / "pay.md").write_text("# Pay\n\nSalaries are paid on the 10th.\n")
    ws = tmp_path / "ws"
    assert run_cli(["ingest", "资料/退货政策.md", "-w", "ws"], ws, cwd=tmp_path).returncode == 0
    tagged = run_cli(
        ["ingest", "资料/hr", "--tenant", "acme", "--tag", "hr", "-w", "ws"], ws, cwd=tmp_path
    )
    assert tagged.returncode == 0, tagged.stderr

    out = run_cli(["sources", "--json", "-w", "ws"], ws, cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    assert "资料/退货政策.md" in out.stdout and "\\u" not in out.stdout  # UTF-8, not escapes
    rows = json.loads(out.stdout)
    assert [r["source"] for r in rows] == ["资料/hr/pay.md", "资料/退货政策.md"]
    pay = rows[0]
    assert set(pay) == {
        "source", "doc_type", "tenants", "tags", "documents", "chunks", "updated_at"
    }  # fmt: skip
    assert pay["doc_type"] == "markdown" and pay["tenants"] == ["acme"] and pay["tags"] == ["hr"]
    assert pay["documents"] == 1 and pay["chunks"] >= 1
    assert isinstance(pay["updated_at"], float) and pay["updated_at"] > 1.7e9
    # ingested alone, untagged: the default tenant, no tags ("-" in the table)
    assert rows[1]["tenants"] == ["default"] and rows[1]["tags"] == []


def test_sources_json_of_a_workspace_with_nothing_indexed_is_an_empty_list(
    tmp_path: Path,
) -> None:
    (tmp_path / "ws").mkdir()

    out = run_cli(["sources", "--json", "-w", "ws"], tmp_path / "ws", cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []  # (the note says why, on stderr)
    assert "nothing" in out.stderr
