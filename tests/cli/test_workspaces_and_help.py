"""Workspace rules and help output of the command line, run as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import shelfhand


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env["COLUMNS"] = "100"
    env["SHELFHAND_EMBEDDER"] = "hashing"
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "command",
    [
        ["search", "保修期"],
        ["sources"],
        ["ask", "what is E-203?"],
        ["audit"],
        ["eval", "cases.jsonl"],
        ["forget", "a.md"],  # (it said "nothing indexed yet", exit 1)
    ],
)
def test_read_only_commands_on_a_missing_workspace_exit_2_and_create_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "cases.jsonl").write_text('{"query": "x", "relevant": ["a.md"]}\n')
    out = run_cli(*command, "-w", "tpyo", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "workspace tpyo does not exist" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "tpyo").exists()


@pytest.mark.parametrize("command", [["ingest", "--samples"], ["search", "保修期"], ["status"]])
def test_a_workspace_that_is_a_file_exits_2_saying_so(tmp_path: Path, command: list[str]) -> None:
    # ingest ended in FileExistsError; search said the workspace did not exist
    (tmp_path / "notes.txt").write_text("not a workspace")
    out = run_cli(*command, "-w", "notes.txt", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "workspace notes.txt is a file, not a folder" in out.stderr
    assert "Traceback" not in out.stderr
    assert (tmp_path / "notes.txt").read_text() == "not a workspace"


@pytest.mark.parametrize("workspace", ["notes.txt/sub", "/proc/no-such-workspace"])
def test_a_workspace_that_cannot_be_created_exits_2_in_one_line(
    tmp_path: Path, workspace: str
) -> None:
    # ingest ended in a NotADirectoryError / FileNotFoundError traceback
    (tmp_path / "notes.txt").write_text("not a workspace")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "退货.md").write_text("# 退货\n\n七天内可退。\n", encoding="utf-8")
    out = run_cli("ingest", "docs", "-w", workspace, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith(f"error: cannot create workspace {workspace}:")
    assert "Traceback" not in out.stderr


def test_search_in_a_folder_of_documents_says_nothing_is_indexed_and_writes_nothing(
    tmp_path: Path,
) -> None:
    # -w named the documents: it created knowledge.db and index/ among them, "not found"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "退货.md").write_text("# 退货\n\n七天内可退。\n", encoding="utf-8")
    out = run_cli("search", "退货", "-w", "docs", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "nothing is indexed in docs" in out.stderr and "shelfhand ingest" in out.stderr
    assert sorted(p.name for p in docs.iterdir()) == ["退货.md"]


def test_shelfhand_alone_prints_its_help_once_and_exits_2(tmp_path: Path) -> None:
    # click 8.2+: the usage, then "error: " and the whole help again
    for command in ([], ["mcp"]):
        out = run_cli(*command, cwd=tmp_path)
        assert out.returncode == 2
        assert out.stderr.count("Usage:") == 1, out.stderr
        assert "error:" not in out.stderr and "Commands:" in out.stderr


def test_mcp_list_on_a_new_workspace_creates_it_and_lists_no_servers(tmp_path: Path) -> None:
    out = run_cli("mcp", "list", "-w", "fresh", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "no MCP servers configured" in out.stdout
    assert (tmp_path / "fresh").is_dir()


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    out = run_cli("--version", cwd=tmp_path)
    assert out.returncode == 0
    assert out.stdout.strip() == f"shelfhand {shelfhand.__version__}"


def test_help_shows_literal_brackets_and_plain_flags(tmp_path: Path) -> None:
    serve = run_cli("serve", "--help", cwd=tmp_path)
    assert serve.returncode == 0
    assert "[[api_keys]]" in serve.stdout
    search = run_cli("search", "--help", cwd=tmp_path)
    assert "--json" in search.stdout and "<bool>" not in search.stdout


def test_narrow_tables_keep_codes_numbers_and_dates_whole(tmp_path: Path) -> None:
    assert run_cli("ingest", "--samples", "-w", "ws", cwd=tmp_path).returncode == 0
    env_columns = {"COLUMNS": "60"}
    out = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "sources", "-w", "ws"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **env_columns},
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    rows = [
        line
        for line in out.stdout.splitlines()
        if re.search(r"│ (markdown|docx|pdf|html) +│", line)  # a row's first line
    ]
    assert len(rows) == 6
    for row in rows:  # type, counts and the date sit whole on the row's first line
        assert re.search(r"\b\d{4}-\d\d-\d\d \d\d:\d\d\b", row), row
    assert max(len(line) for line in out.stdout.splitlines()) <= 60


@pytest.mark.parametrize("command", [["search", "保修期"], ["status"], ["sources"]])
def test_an_unreachable_database_is_a_one_line_error_not_a_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    from shelfhand.dev.services import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env["SHELFHAND_DATABASE_URL"] = f"postgresql://app:s3cret@127.0.0.1:{free_port()}/shelf"
    done = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *command, "-w", str(tmp_path / "ws")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unreachable" in done.stderr
    assert "Traceback" not in done.stderr and "s3cret" not in done.stderr


@pytest.mark.parametrize(
    ("command", "flag"),
    [(["trace", "--limit", "-5"], "--limit"), (["usage", "--days", "0"], "--days")],
)
def test_a_count_below_one_is_a_usage_error(tmp_path: Path, command: list[str], flag: str) -> None:
    # trace --limit -5 and usage --days -3 were taken (the API answers 422 to them)
    out = run_cli(*command, "-w", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"Invalid value for '{flag}'" in out.stderr


def test_a_shelfhand_toml_beside_the_project_is_said_not_to_be_read(tmp_path: Path) -> None:
    # with the default workspace (./.shelfhand), ./shelfhand.toml was ignored without a word
    (tmp_path / "shelfhand.toml").write_text('[shelfhand]\nretrieval_mode = "keyword"\n')
    out = run_cli("ingest", "--samples", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "./shelfhand.toml is not read: settings are read from the workspace's" in out.stderr
    named = run_cli("config", "-w", ".", cwd=tmp_path)  # named as the workspace: it is read
    assert named.returncode == 0 and "not read" not in named.stderr
    assert "keyword" in named.stdout
