"""``shelfhand ingest`` names each file once: the workspace inside an ingested folder is not
indexed, a subfolder keeps its indexed folder's names, a file of a different folder with an
indexed name is refused, and an emptied file leaves the index."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

from support.cli import run_cli


def shelfhand(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), cwd / "kb", cwd=cwd)  # (each test names its workspace, -w)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def sources(workspace: Path) -> list[str]:
    with sqlite3.connect(workspace / "knowledge.db") as conn:
        return sorted(row[0] for row in conn.execute("SELECT source FROM sources"))


def test_ingesting_the_folder_that_holds_the_workspace_settles(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    write(notes / "笔记.md", "# 笔记\n\nhi")
    runs = [shelfhand("ingest", ".", "-w", "kb", cwd=notes) for _ in range(3)]
    assert [r.returncode for r in runs] == [0, 0, 0], runs[-1].stderr
    assert runs[0].stdout.lstrip().startswith("1 added, 0 updated")
    assert "0 added, 0 updated, 1 unchanged, 0 removed, 0 skipped;" in runs[2].stdout
    # nor is the workspace looked into for files ingest will not read
    assert "not read in" not in runs[2].stdout + runs[2].stderr, runs[2].stdout
    assert sources(notes / "kb") == ["notes/笔记.md"]


def test_reingesting_a_subfolder_updates_the_one_source(tmp_path: Path) -> None:
    write(tmp_path / "tree" / "docs" / "top.md", "top")
    write(tmp_path / "tree" / "docs" / "sub" / "s.md", "sub v1 submarker")
    assert shelfhand("ingest", "tree/docs", "-w", "W", cwd=tmp_path).returncode == 0
    write(tmp_path / "tree" / "docs" / "sub" / "s.md", "sub v2 submarker")
    out = shelfhand("ingest", "tree/docs/sub", "-w", "W", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.lstrip().startswith("0 added, 1 updated"), out.stdout
    found = shelfhand("search", "submarker", "-w", "W", "--mode", "keyword", cwd=tmp_path)
    assert "docs/sub/s.md" in found.stdout and "v2" in found.stdout
    assert "v1" not in found.stdout and "(sub/s.md)" not in found.stdout
    assert sources(tmp_path / "W") == ["docs/sub/s.md", "docs/top.md"]


def test_one_file_of_another_folder_with_an_indexed_name_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "x1" / "docs" / "readme.md", "alphamarker")
    write(tmp_path / "x2" / "docs" / "readme.md", "betamarker")
    assert shelfhand("ingest", "x1/docs", "-w", "W", cwd=tmp_path).returncode == 0
    assert shelfhand("ingest", "x2/docs", "-w", "W", cwd=tmp_path).returncode == 1
    out = shelfhand("ingest", "x2/docs/readme.md", "-w", "W", cwd=tmp_path)
    assert out.returncode == 1
    assert "a different folder named 'docs' is already indexed" in out.stderr + out.stdout
    found = shelfhand("search", "alphamarker", "-w", "W", "--mode", "keyword", cwd=tmp_path)
    assert "docs/readme.md" in found.stdout


def test_an_emptied_file_is_removed_and_the_skip_line_says_so(tmp_path: Path) -> None:
    write(tmp_path / "c" / "a.md", "origmarker")
    assert shelfhand("ingest", "c", "-w", "W", cwd=tmp_path).returncode == 0
    (tmp_path / "c" / "a.md").write_bytes(b"")
    out = shelfhand("ingest", "c", "-w", "W", cwd=tmp_path)
    assert out.returncode == 3
    assert "1 removed, 1 skipped" in out.stdout
    assert "skipped c/a.md: the file is empty; its indexed version was removed" in out.stdout
    found = shelfhand("search", "origmarker", "-w", "W", "--mode", "keyword", cwd=tmp_path)
    assert "no passage matches" in found.stdout and "c/a.md" not in found.stdout
