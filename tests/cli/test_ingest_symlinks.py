"""``shelfhand ingest`` of a folder does not follow its symbolic links to folders (a link can
loop, or lead out of the folder given), and now says which it left out and why, once each:
they were skipped without a word, and the documents behind them were silently missing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from support.cli import run_cli


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_a_folder_walk_names_the_linked_folders_it_does_not_follow(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs / "退货.md", "# 退货\n\n拆封后七天内可退货。\n")
    write(docs / "en" / "guide.md", "# Guide\n\nPress the power button for three seconds.\n")
    write(tmp_path / "共享" / "保修.md", "# 保修\n\n整机保修一年。\n")
    os.symlink("../共享", docs / "共享链接")  # out of the folder given
    os.symlink("..", docs / "en" / "loop")  # a loop
    os.symlink("../.hidden-target", docs / ".hidden")  # hidden: skipped as hidden names are
    ws = tmp_path / "ws"

    out = run_cli(["ingest", "docs", "-w", "ws"], ws, cwd=tmp_path)
    again = run_cli(["ingest", "docs", "-w", "ws"], ws, cwd=tmp_path)

    assert out.returncode == 0, out.stdout + out.stderr
    note = next(line for line in out.stdout.splitlines() if "symbolic link" in line)
    assert note.startswith("note: not followed in docs: 2 symbolic links to folders"), note
    assert "en/loop -> .." in note and "共享链接 -> ../共享" in note
    assert "could loop or lead outside the folder" in note
    assert out.stdout.count("共享链接") == 1 and ".hidden" not in out.stdout
    assert "symbolic link" in again.stdout  # each run says so (nothing changed: still left out)
    # what is indexed is what it was: the links' documents are not
    listed = run_cli(["sources", "--json", "-w", "ws"], ws, cwd=tmp_path)
    names = [s["source"] for s in json.loads(listed.stdout) if s["source"].startswith("docs/")]
    assert names == ["docs/en/guide.md", "docs/退货.md"]


def test_a_folder_without_linked_folders_gets_no_such_note(tmp_path: Path) -> None:
    write(tmp_path / "docs" / "a.md", "# A\n\nText.\n")
    os.symlink("a.md", tmp_path / "docs" / "b.md")  # a link to a file is read, as before

    out = run_cli(["ingest", "docs", "-w", "ws"], tmp_path / "ws", cwd=tmp_path)

    assert out.returncode == 0, out.stdout + out.stderr
    assert "symbolic link" not in out.stdout + out.stderr
