"""Incremental ingest of files: skip unchanged, replace edited, remove vanished, survive kill -9."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from shelfhand.core.errors import UnreadableDocumentError
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.ingest.ingestor import IngestEvent
from shelfhand.knowledge.stack import EmbeddedKnowledge, open_embedded_store

OpenStack = Callable[..., EmbeddedKnowledge]  # the open_stack fixture (conftest.py)


class CountingEmbedder:
    """Hashing bag of characters; counts the texts it embeds and can be told to fail."""

    def __init__(self) -> None:
        self.texts = 0
        self.fail = False

    @property
    def name(self) -> str:
        return "counting"

    @property
    def dim(self) -> int:
        return 16

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            raise ConnectionError("embedding service unavailable")
        self.texts += len(texts)
        out = np.zeros((len(texts), 16), dtype=np.float32)
        for i, text in enumerate(texts):
            for ch in text:
                out[i, ord(ch) % 16] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    write(root / "warranty.md", "# Warranty\n\nThe projector warranty lasts twelve months.\n")
    write(
        root / "zh" / "保修.md",
        "# 保修政策\n\n投影仪保修期为12个月。\n\n## 退货\n\n拆封后7天内可退。\n",
    )
    write(root / "errors.txt", "E-203: lamp overheating. Clean the filter.\n")
    return root


def open_kb(opener: Path | OpenStack, embedder: CountingEmbedder) -> EmbeddedKnowledge:
    """The store of ``opener`` (the ``open_stack`` fixture: both stores) or the embedded
    store of a workspace."""
    router = EmbeddingRouter({"default": embedder})
    if isinstance(opener, Path):
        return open_embedded_store(opener, router)
    return opener(router)


def assert_consistent(kb: EmbeddedKnowledge) -> None:
    assert kb.keyword.num_docs() == kb.store.count_chunks()
    assert kb.vectors.count() == kb.store.count_vectors() == kb.store.count_chunks()


def test_a_second_ingest_of_an_unchanged_folder_embeds_nothing(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    embedder = CountingEmbedder()
    kb = open_kb(open_stack, embedder)
    events: list[IngestEvent] = []
    first = kb.ingestor.ingest([docs], progress=events.append)
    assert sorted(first.added) == ["docs/errors.txt", "docs/warranty.md", "docs/zh/保修.md"]
    assert first.chunks == kb.store.count_chunks() > 0
    assert events[-1].kind == "done" and events[-1].done == 3
    embedded = embedder.texts
    second = kb.ingestor.ingest([docs])
    assert len(second.unchanged) == 3 and not second.added and not second.updated
    assert embedder.texts == embedded
    assert_consistent(kb)
    kb.close()


def test_an_edited_file_replaces_its_chunks(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    kb = open_kb(open_stack, CountingEmbedder())
    kb.ingestor.ingest([docs])
    write(docs / "warranty.md", "# Warranty\n\nThe projector warranty now lasts two years.\n")
    report = kb.ingestor.ingest([docs])
    assert report.updated == ("docs/warranty.md",)
    texts = [h.chunk.text for h in kb.retriever.search("warranty", mode="keyword")]
    assert any("two years" in t for t in texts)
    assert not any("twelve" in t for t in texts)
    assert_consistent(kb)
    kb.close()


def test_a_removed_file_disappears_from_store_and_indexes(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    kb = open_kb(open_stack, CountingEmbedder())
    kb.ingestor.ingest([docs])
    (docs / "errors.txt").unlink()
    report = kb.ingestor.ingest([docs])
    assert report.removed == ("docs/errors.txt",)
    assert kb.retriever.search("E-203", mode="keyword") == []
    assert "docs/errors.txt" not in {s.source for s in kb.store.sources()}
    assert_consistent(kb)
    kb.close()


def test_ingesting_one_file_leaves_the_rest_of_its_folder_alone(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    kb = open_kb(open_stack, CountingEmbedder())
    kb.ingestor.ingest([docs])
    report = kb.ingestor.ingest([docs / "errors.txt"])
    assert report.unchanged == ("docs/errors.txt",) and not report.removed
    assert kb.store.count_documents() == 3
    assert kb.ingestor.forget("docs/errors.txt") == 1
    assert kb.store.count_documents() == 2
    kb.close()


def test_unreadable_files_are_reported_and_the_rest_ingested(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    write(docs / "empty.md", "   \n")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    kb = open_kb(open_stack, CountingEmbedder())
    report = kb.ingestor.ingest([docs])
    assert sorted(f.source for f in report.failed) == ["docs/broken.pdf", "docs/empty.md"]
    assert len(report.added) == 3
    kb.close()


def test_a_file_whose_name_is_not_utf8_is_reported_and_the_rest_ingested(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    # a name written in another encoding (GBK's 保修): Python reads its bytes as lone
    # surrogates, which no store can hold; it ended the whole ingest with UnicodeEncodeError
    (docs / os.fsdecode(b"\xb1\xa3\xd0\xde.md")).write_text("# GBK name\n\nE-310.\n")
    kb = open_kb(open_stack, CountingEmbedder())
    report = kb.ingestor.ingest([docs])
    assert [(f.source, f.reason) for f in report.failed] == [
        ("docs/\\xb1\\xa3\\xd0\\xde.md", "its name is not UTF-8 text (rename it)")
    ]
    assert len(report.added) == 3
    assert_consistent(kb)
    kb.close()


def test_a_folder_whose_name_is_not_utf8_is_refused_before_anything_is_stored(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    folder = tmp_path / os.fsdecode(b"\xb1\xa3\xd0\xde")
    write(folder / "a.md", "# A\n\nE-310.\n")
    kb = open_kb(open_stack, CountingEmbedder())
    with pytest.raises(UnreadableDocumentError, match=r"xb1.*not UTF-8 text"):
        kb.ingestor.ingest([docs, folder])
    assert kb.store.count_documents() == 0
    kb.close()


def test_an_embedding_failure_keeps_the_text_searchable_and_is_retried(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    embedder = CountingEmbedder()
    embedder.fail = True
    kb = open_kb(open_stack, embedder)
    report = kb.ingestor.ingest([docs])
    assert len(report.embedding_failed) == 3
    assert "unavailable" in report.embedding_failed[0].reason
    assert kb.store.count_vectors() == 0
    hits = kb.retriever.search("保修期", mode="keyword")
    assert {h.chunk.source for h in hits} == {"docs/zh/保修.md"}
    assert "保修期为12个月" in hits[0].chunk.text

    assert report.pending_chunks == kb.store.count_pending() == kb.store.count_chunks() > 0
    assert report.embedding_error is not None and "unavailable" in report.embedding_error

    embedder.fail = False  # the embedder is back: the next ingest embeds what is pending
    retry = kb.ingestor.ingest([docs])
    assert len(retry.unchanged) == 3 and not retry.embedding_failed
    assert retry.embedded_chunks == kb.store.count_chunks() and retry.pending_chunks == 0
    assert_consistent(kb)
    again = kb.ingestor.ingest([docs])
    assert again.unchanged and again.embedded_chunks == 0  # now settled
    kb.close()


def test_an_embedder_outage_leaves_chunks_pending_until_embed_pending_runs(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    embedder = CountingEmbedder()
    embedder.fail = True
    kb = open_kb(open_stack, embedder)
    kb.ingestor.ingest([docs])
    hits, timings = kb.retriever.search_timed("warranty twelve months", mode="hybrid")
    assert hits[0].chunk.source == "docs/warranty.md"  # keywords stand in for vectors
    assert timings.pending_chunks == kb.store.count_chunks()

    embedder.fail = False
    done = kb.ingestor.embed_pending()
    assert done.embedded_chunks == kb.store.count_chunks() and done.pending_chunks == 0
    hits, timings = kb.retriever.search_timed("保修期", mode="vector")
    assert timings.pending_chunks == 0
    assert any(h.chunk.source == "docs/zh/保修.md" for h in hits)
    assert_consistent(kb)
    kb.close()


def test_no_wait_stores_text_first_and_leaves_embedding_for_later(
    open_stack: OpenStack, tmp_path: Path, docs: Path
) -> None:
    embedder = CountingEmbedder()
    kb = open_kb(open_stack, embedder)
    report = kb.ingestor.ingest([docs], wait=False)
    assert len(report.added) == 3 and report.embedded_chunks == 0
    assert embedder.texts == 0 and report.pending_chunks == kb.store.count_chunks()
    assert [h.chunk.source for h in kb.retriever.search("E-203", mode="keyword")] == [
        "docs/errors.txt"
    ]
    assert kb.ingestor.embed_pending().embedded_chunks == kb.store.count_chunks()
    assert_consistent(kb)
    kb.close()


def test_a_big_file_is_committed_in_batches_and_searchable_before_it_is_embedded(
    tmp_path: Path,
) -> None:
    root = tmp_path / "big"
    paragraphs = [f"Section {i} describes lamp part P{i:03d} in detail." for i in range(120)]
    write(root / "manual.txt", "\n\n".join(paragraphs))
    write(root / "a-small.md", "# Small\n\nThe remote uses two AAA batteries.")
    embedder = CountingEmbedder()
    kb = open_kb(tmp_path / "ws", embedder)
    kb.ingestor.max_tokens, kb.ingestor.overlap_tokens = 16, 0
    kb.ingestor.batch_chunks = 10
    commits: list[int] = []
    events: list[IngestEvent] = []

    def watch(event: IngestEvent) -> None:
        events.append(event)
        if event.kind == "progress":  # between batches of the big file
            commits.append(kb.store.count_chunks())

    report = kb.ingestor.ingest([root], progress=watch, wait=False)
    assert report.chunks == kb.store.count_chunks() > 60
    assert len(commits) >= 6 and commits == sorted(commits) and commits[0] < report.chunks
    kinds = [(e.kind, e.source) for e in events if e.kind == "stored"]
    assert kinds[0] == ("stored", "big/a-small.md")  # small files first
    assert events[0].bytes_total == sum(f.stat().st_size for f in root.iterdir())
    progress_bytes = [e.bytes_done for e in events if e.phase == "index"]
    assert progress_bytes == sorted(progress_bytes)
    assert [h.chunk.source for h in kb.retriever.search("P117", mode="keyword")] == [
        "big/manual.txt"
    ]
    doc = kb.store.sources()[0]
    assert sum(s.chunks for s in kb.store.sources()) == report.chunks and doc.documents == 1
    assert kb.store.count_pending() == report.chunks
    # Replaying an appended-chunks change (a crash before the outbox row was deleted) must not
    # index a chunk twice.
    from shelfhand.knowledge.stores.outbox import IndexChange

    appended = [s.rowid for s in kb.store.iter_chunks() if s.chunk.source == "big/manual.txt"]
    replay = IndexChange(
        outbox_id=0, generation=0, doc_id="x", old_rowids=(), kind="chunks", rowids=tuple(appended)
    )
    kb.keyword.apply(kb.store, [replay])
    kb.keyword.flush(kb.store.generation, durable=True)
    assert kb.keyword.num_docs() == kb.store.count_chunks()
    kb.ingestor.embed_pending()
    assert_consistent(kb)
    assert kb.ingestor.ingest([root]).unchanged  # the file hash was recorded at the end
    kb.close()


def test_an_unexpected_exception_in_one_file_skips_only_that_file(
    open_stack: OpenStack, tmp_path: Path, docs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shelfhand.knowledge.ingest import ingestor as ingest_module

    real = ingest_module.read_file

    def flaky(path: Path, **kwargs: object) -> object:
        if path.name == "warranty.md":
            raise RecursionError("maximum recursion depth exceeded")
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest_module, "read_file", flaky)
    kb = open_kb(open_stack, CountingEmbedder())
    report = kb.ingestor.ingest([docs])
    assert [f.source for f in report.failed] == ["docs/warranty.md"]
    assert report.failed[0].reason == "RecursionError: maximum recursion depth exceeded"
    assert sorted(report.added) == ["docs/errors.txt", "docs/zh/保修.md"]
    assert_consistent(kb)
    kb.close()


_CHILD = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    import numpy as np
    from shelfhand.knowledge.embeddings.router import EmbeddingRouter
    from shelfhand.knowledge.stack import open_embedded_store

    class Hanging:
        name = "counting"
        dim = 16
        calls = 0
        def embed(self, texts):
            Hanging.calls += 1
            if Hanging.calls > 20:
                threading.Event().wait()  # hang here until killed
            out = np.zeros((len(texts), 16), dtype=np.float32)
            for i, t in enumerate(texts):
                for ch in t:
                    out[i, ord(ch) % 16] += 1
            return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
        def embed_query(self, text):
            return self.embed([text])[0]

    def hang_at_20th_file(event):
        if sys.argv[3] == "index" and event.kind == "stored" and event.done == 20:
            threading.Event().wait()  # hang after 20 files are committed

    kb = open_embedded_store(Path(sys.argv[1]), EmbeddingRouter({"default": Hanging()}))
    kb.ingestor.group_chunks = 1
    kb.ingestor.batch_size = 1
    kb.ingestor.sync_every = 7
    kb.ingestor.ingest([Path(sys.argv[2])], progress=hang_at_20th_file)
    """
)


def _run_and_kill(tmp_path: Path, root: Path, phase: str, query: str) -> Path:
    """Run the child until it hangs with 20 files (``index``) or 20 vectors (``embed``)
    committed, then kill -9 it."""
    workspace = tmp_path / "ws"
    script = tmp_path / "child.py"
    script.write_text(_CHILD, encoding="utf-8")
    child = subprocess.Popen([sys.executable, str(script), str(workspace), str(root), phase])
    try:
        deadline = time.monotonic() + 60
        stored = 0
        while stored < 20 and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the database, not coordinating by time
            try:
                with sqlite3.connect(workspace / "knowledge.db") as conn:
                    stored = conn.execute(query).fetchone()[0]
            except sqlite3.Error:
                stored = 0
        assert child.poll() is None, "the child finished or died before it could be killed"
        assert stored == 20
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    return workspace


def _many(tmp_path: Path) -> Path:
    root = tmp_path / "many"
    for i in range(50):
        write(root / f"doc{i:02d}.md", f"# Doc {i}\n\nParagraph {i} about lamp model L{i}.\n")
    return root


def test_a_killed_ingest_is_completed_consistently_by_the_next_run(tmp_path: Path) -> None:
    root = _many(tmp_path)
    workspace = _run_and_kill(tmp_path, root, "index", "SELECT COUNT(*) FROM sources")
    with sqlite3.connect(workspace / "knowledge.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM index_outbox").fetchone()[0] > 0

    embedder = CountingEmbedder()
    kb = open_kb(workspace, embedder)
    assert kb.keyword.num_docs() == kb.store.count_chunks()  # replayed on open
    report = kb.ingestor.ingest([root])
    assert len(report.unchanged) == 20 and len(report.added) == 30
    assert kb.store.count_documents() == 50
    assert_consistent(kb)
    assert [h.chunk.source for h in kb.retriever.search("L7", mode="keyword")] == ["many/doc07.md"]
    kb.close()


def test_an_ingest_killed_while_embedding_keeps_its_vectors_and_finishes_later(
    tmp_path: Path,
) -> None:
    root = _many(tmp_path)
    workspace = _run_and_kill(tmp_path, root, "embed", "SELECT COUNT(*) FROM embeddings")
    embedder = CountingEmbedder()
    kb = open_kb(workspace, embedder)
    assert kb.store.count_documents() == 50 and kb.store.count_vectors() == 20
    assert kb.vectors.count() == 20 and kb.keyword.num_docs() == kb.store.count_chunks()
    report = kb.ingestor.ingest([root])
    assert len(report.unchanged) == 50 and report.embedded_chunks == 30 == embedder.texts
    assert_consistent(kb)
    kb.close()


def test_ready_made_documents_are_ingested_and_skipped_when_unchanged(
    open_stack: OpenStack, tmp_path: Path
) -> None:
    from shelfhand.knowledge.types import Document, Section

    def doc(i: int, text: str) -> Document:
        return Document(
            doc_id=f"beir-{i}",
            source="scifact",
            title=f"T{i}",
            doc_type="text",
            sections=(Section(text=text),),
            content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        )

    embedder = CountingEmbedder()
    kb = open_kb(open_stack, embedder)
    first = kb.ingestor.ingest_documents([doc(i, f"claim {i} about cells") for i in range(5)])
    assert len(first.added) == 5 and kb.store.count_documents() == 5
    again = kb.ingestor.ingest_documents([doc(i, f"claim {i} about cells") for i in range(5)])
    assert len(again.unchanged) == 5
    assert_consistent(kb)
    kb.close()


def test_a_keyword_only_ingest_is_embedded_by_the_next_ingest_with_embedders(
    tmp_path: Path,
) -> None:
    from shelfhand.knowledge.embeddings.local import HashingEmbedder
    from shelfhand.knowledge.embeddings.router import EmbeddingRouter
    from shelfhand.knowledge.stack import open_embedded_store

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Lamp\n\nThe lamp lasts 5000 hours.", encoding="utf-8")
    keyword_only = open_embedded_store(tmp_path / "ws", None)
    keyword_only.ingestor.ingest([docs])
    assert keyword_only.store.count_vectors() == 0
    keyword_only.close()

    hybrid = open_embedded_store(tmp_path / "ws", EmbeddingRouter({"any": HashingEmbedder()}))
    report = hybrid.ingestor.ingest([docs])
    assert report.embedded_chunks == hybrid.store.count_chunks() > 0
    assert hybrid.store.count_vectors() == hybrid.store.count_chunks()
    again = hybrid.ingestor.ingest([docs])
    assert again.embedded_chunks == 0 and again.unchanged
    hybrid.close()


def test_two_different_folders_with_the_same_name_are_refused_not_mixed(tmp_path: Path) -> None:
    from shelfhand.core.errors import KnowledgeError
    from shelfhand.knowledge.stack import open_embedded_store

    first, second = tmp_path / "a" / "docs", tmp_path / "b" / "docs"
    for folder, text in ((first, "Alpha manual."), (second, "Beta manual.")):
        folder.mkdir(parents=True)
        (folder / "manual.md").write_text(f"# Manual\n\n{text}", encoding="utf-8")
    (first / "only-in-a.md").write_text("# A\n\nOnly in a.", encoding="utf-8")
    stack = open_embedded_store(tmp_path / "ws", None)
    stack.ingestor.ingest([first])
    before = sorted(stack.store.all_sources())
    with pytest.raises(KnowledgeError, match="different folder named 'docs'"):
        stack.ingestor.ingest([second])
    assert sorted(stack.store.all_sources()) == before  # nothing overwritten or pruned
    assert stack.ingestor.forget("docs/") == 2
    assert stack.store.all_sources() == []
    stack.ingestor.ingest([second])  # after forgetting, the other folder may take the name
    assert sorted(stack.store.all_sources()) == ["docs/manual.md"]
    stack.close()
