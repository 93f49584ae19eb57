"""A blank ``--tenant`` or ``--tag`` is refused (exit 2), as an API key's blank tenant is: an
ingest for tenant "" moved the files to a tenant nobody searches, and reported them updated."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli import run_cli


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--tenant", ""], "--tenant"),
        (["--tenant", "acme", "--tag", "hr", "--tag", "  "], "--tag"),
    ],
)
def test_a_blank_tenant_or_tag_is_refused_and_nothing_moves(
    tmp_path: Path, args: list[str], option: str
) -> None:
    (tmp_path / "资料").mkdir()
    (tmp_path / "资料" / "退货.md").write_text("# 退货\n\n拆封后七天内可退货。\n", encoding="utf-8")
    ws = tmp_path / "ws"
    assert run_cli(["ingest", "资料", "-w", "ws"], ws, cwd=tmp_path).returncode == 0

    out = run_cli(["ingest", "资料", "-w", "ws", *args], ws, cwd=tmp_path)

    assert out.returncode == 2 and f"'{option}'" in out.stderr and "empty" in out.stderr
    found = run_cli(["search", "退货", "-w", "ws"], ws, cwd=tmp_path)
    assert "资料/退货.md" in found.stdout  # still the default tenant's


def test_a_search_for_a_blank_tenant_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    out = run_cli(["search", "x", "-w", "ws", "--tenant", " "], tmp_path / "ws", cwd=tmp_path)
    assert out.returncode == 2 and "'--tenant'" in out.stderr
