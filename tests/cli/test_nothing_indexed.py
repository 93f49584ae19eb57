"""Every command run on a workspace with nothing indexed says so in one sentence: the
workspace's path and the command that indexes documents into it (``shelfhand ingest PATH -w
WS``); those that stop exit 2. Five commands said it five ways ("nothing indexed yet",
"Nothing is indexed yet either: `shelfhand ingest`", ...), forget exited 1, only search
named the workspace when it stopped, and ``mcp serve`` said nothing at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli import run_cli

WS = "工作区"  # a Chinese workspace name, as a user may give one


def said(workspace: str) -> str:
    return (
        f"nothing is indexed in {workspace}: index documents with "
        f"`shelfhand ingest PATH -w {workspace}`"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["search", "保修期多久"],
        ["ask", "保修期多久？"],  # no chat model configured
        ["chat"],
        ["eval", "cases.jsonl"],
        ["eval-answers"],
        ["embed"],
        ["reindex"],
        ["forget", "docs/退货.md"],
    ],
)
def test_commands_that_need_an_index_stop_with_one_message_and_exit_2(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / WS).mkdir()
    (tmp_path / "cases.jsonl").write_text('{"query": "x", "relevant": ["a.md"]}\n')

    out = run_cli([*command, "-w", WS], tmp_path / WS, cwd=tmp_path, stdin="hi\n\n")

    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith(f"error: {said(WS)}"), out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert list((tmp_path / WS).iterdir()) == []  # nothing created on the way


@pytest.mark.parametrize(
    "command", [["status"], ["sources"], ["sources", "--json"], ["mcp", "serve"]]
)
def test_listings_and_mcp_serve_say_the_same_and_go_on(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / WS).mkdir()

    out = run_cli([*command, "-w", WS], tmp_path / WS, cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    assert said(WS) in out.stdout + out.stderr


def test_the_message_names_the_workspace_given_by_its_path(tmp_path: Path) -> None:
    # the default workspace of another folder: the path is what tells the user where it looked
    ws = tmp_path / "项目" / ".shelfhand"
    ws.mkdir(parents=True)

    out = run_cli(["search", "E-203"], ws, cwd=tmp_path / "项目")

    assert out.returncode == 2
    assert said(str(ws)) in out.stderr
