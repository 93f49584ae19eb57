"""How files on disk become sources: one file is one source whatever folder above it is named
on the command line, the workspace is never ingested, and an emptied file leaves the index."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from shelfhand.core.errors import KnowledgeError, UnreadableDocumentError
from shelfhand.knowledge.base import KnowledgeBase
from shelfhand.knowledge.stack import EmbeddedKnowledge

OpenStack = Callable[..., EmbeddedKnowledge]  # the open_stack fixture (conftest.py)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def texts_of(stack: EmbeddedKnowledge, query: str) -> dict[str, str]:
    hits = stack.retriever.search(query, k=10, mode="keyword")
    return {hit.chunk.source: hit.chunk.text for hit in hits}


def test_a_workspace_inside_the_ingested_folder_is_never_indexed(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    write(notes / "a.md", "# A\n\nhi there")
    write(notes / "深" / "层" / "笔记.md", "# 笔记\n\n工作区之外的笔记")
    with KnowledgeBase(notes / "deep" / "kb", None, mode="keyword") as kb:
        first = kb.ingest([notes])
        assert sorted(first.added) == ["notes/a.md", "notes/深/层/笔记.md"]
        for _ in range(2):  # the workspace's own files changed meanwhile: still not sources
            again = kb.ingest([notes])
            assert (again.added, again.updated, again.removed) == ((), (), ())
            assert sorted(again.unchanged) == ["notes/a.md", "notes/深/层/笔记.md"]
        assert sorted(s.source for s in kb.sources()) == ["notes/a.md", "notes/深/层/笔记.md"]


def test_a_subfolder_of_an_indexed_folder_keeps_that_folders_source_names(
    open_stack: OpenStack, tmp_path: Path
) -> None:
    docs = tmp_path / "tree" / "docs"
    write(docs / "top.md", "# Top\n\ntop level")
    write(docs / "子目录" / "说明.md", "# 说明\n\n第一版 submarker")
    write(docs / "子目录" / "old.md", "# Old\n\nsoon gone")
    stack = open_stack(None)
    stack.ingestor.ingest([docs])
    write(docs / "子目录" / "说明.md", "# 说明\n\n第二版 submarker")
    (docs / "子目录" / "old.md").unlink()
    report = stack.ingestor.ingest([docs / "子目录"])
    assert report.updated == ("docs/子目录/说明.md",) and report.added == ()
    assert report.removed == ("docs/子目录/old.md",)  # what vanished from the subfolder goes
    assert texts_of(stack, "submarker") == {"docs/子目录/说明.md": "第二版 submarker"}
    one = stack.ingestor.ingest([docs / "子目录" / "说明.md"])  # a file in it: the same source
    assert one.unchanged == ("docs/子目录/说明.md",)
    assert sorted(stack.store.all_sources()) == ["docs/top.md", "docs/子目录/说明.md"]
    stack.close()


def test_a_folder_around_an_indexed_folder_keeps_the_inner_source_names(
    open_stack: OpenStack, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    write(tree / "docs" / "s.md", "# S\n\nv1 innermarker")
    write(tree / "readme.md", "# Readme\n\noutside docs")
    stack = open_stack(None)
    stack.ingestor.ingest([tree / "docs"])
    write(tree / "docs" / "s.md", "# S\n\nv2 innermarker")
    report = stack.ingestor.ingest([tree])
    assert report.updated == ("docs/s.md",) and report.added == ("tree/readme.md",)
    assert texts_of(stack, "innermarker") == {"docs/s.md": "v2 innermarker"}
    (tree / "docs" / "s.md").unlink()
    assert stack.ingestor.ingest([tree]).removed == ("docs/s.md",)
    stack.close()


def test_one_file_of_a_different_folder_with_an_indexed_name_is_refused(
    open_stack: OpenStack, tmp_path: Path
) -> None:
    first, second = tmp_path / "x1" / "资料", tmp_path / "x2" / "资料"
    write(first / "readme.md", "# Readme\n\nalphamarker")
    write(second / "readme.md", "# Readme\n\nbetamarker")
    stack = open_stack(None)
    stack.ingestor.ingest([first])
    with pytest.raises(KnowledgeError, match="different folder named '资料'"):
        stack.ingestor.ingest([second])
    with pytest.raises(KnowledgeError, match="different folder named '资料'"):
        stack.ingestor.ingest([second / "readme.md"])
    assert texts_of(stack, "alphamarker") == {"资料/readme.md": "alphamarker"}
    assert stack.ingestor.ingest([first / "readme.md"]).unchanged == ("资料/readme.md",)
    stack.close()


def test_a_folder_with_the_name_of_a_file_ingested_alone_is_refused(
    open_stack: OpenStack, tmp_path: Path
) -> None:
    first, second = tmp_path / "x1" / "docs", tmp_path / "x2" / "docs"
    write(first / "readme.md", "# Readme\n\nalphamarker")
    write(second / "readme.md", "# Readme\n\nbetamarker")
    stack = open_stack(None)
    stack.ingestor.ingest([first / "readme.md"])
    with pytest.raises(KnowledgeError, match="different folder named 'docs'"):
        stack.ingestor.ingest([second])
    assert texts_of(stack, "alphamarker") == {"docs/readme.md": "alphamarker"}
    stack.close()


def test_an_indexed_file_emptied_on_purpose_leaves_the_index(
    open_stack: OpenStack, tmp_path: Path
) -> None:
    folder = tmp_path / "c"
    write(folder / "退货.md", "# 退货\n\norigmarker")
    write(folder / "other.md", "# Other\n\nstays")
    stack = open_stack(None)
    stack.ingestor.ingest([folder])
    (folder / "退货.md").write_bytes(b"  \n")
    report = stack.ingestor.ingest([folder])
    assert report.removed == ("c/退货.md",)
    assert [(f.source, f.reason) for f in report.failed] == [
        ("c/退货.md", "the file is empty; its indexed version was removed")
    ]
    assert texts_of(stack, "origmarker") == {}
    assert sorted(stack.store.all_sources()) == ["c/other.md"]
    again = stack.ingestor.ingest([folder])  # nothing left to remove: the plain reason
    assert again.removed == ()
    assert [(f.source, f.reason) for f in again.failed] == [("c/退货.md", "the file is empty")]
    stack.close()


def test_an_indexed_file_that_no_longer_reads_keeps_its_previous_version(
    open_stack: OpenStack, tmp_path: Path
) -> None:
    folder = tmp_path / "c"
    write(folder / "记录.json", '{"id": 1, "text": "origmarker"}')
    stack = open_stack(None)
    stack.ingestor.ingest([folder])
    write(folder / "记录.json", '{"id": 1, "text": ')  # corrupt
    report = stack.ingestor.ingest([folder])
    assert report.removed == ()
    [failure] = report.failed
    assert failure.source == "c/记录.json"
    assert failure.reason.endswith("(the previous version is kept)")
    assert list(texts_of(stack, "origmarker")) == ["c/记录.json"]
    assert stack.store.all_sources() == ["c/记录.json"]
    stack.close()


def test_a_fifo_given_is_refused_not_read(tmp_path: Path) -> None:
    # reading it would wait for a writer forever
    fifo = tmp_path / "管道.md"
    os.mkfifo(fifo)
    with KnowledgeBase(tmp_path / "kb", None, mode="keyword") as kb:
        with pytest.raises(UnreadableDocumentError, match="not a regular file or folder"):
            kb.ingest([fifo])
        assert kb.sources() == []
