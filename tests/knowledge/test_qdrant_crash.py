"""A process killed (SIGKILL) while it writes to Qdrant Edge loses nothing and leaves nothing
stale: the next open replays the outbox rows the index never acknowledged.

The child ingests a first version of the documents, then a second (every other document
changed, new ones added) and is killed at a chosen point of the index's write: before the new
points reach the shard (the old ones already deleted), or after they did but before the
outbox was acknowledged. The test then opens the workspace, finds every document by the word only its stored text
holds, and counts as many points as stored chunks (none of a replaced chunk left)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shelfhand.knowledge import KnowledgeBase
from shelfhand.testing import hashing_router

pytest.importorskip("qdrant_edge")

CHILD = textwrap.dedent(
    """
    import hashlib, os, signal, sys
    from pathlib import Path
    from shelfhand.knowledge import KnowledgeBase
    from shelfhand.knowledge.stores.qdrant.index import QdrantIndex
    from shelfhand.knowledge.types import Document, Section
    from shelfhand.testing import hashing_router

    ws, qdrant, point = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

    def doc(i, version):
        word = f"old{i}x" if version == 1 or i % 2 else f"new{i}y"
        text = f"Lamp manual page {i}: {word} 灯泡 说明书 第{i}页"
        return Document(
            doc_id=f"d{i}", source=f"d{i}.md", title=f"Doc {i}", doc_type="markdown",
            sections=(Section(text=text),), content_hash=hashlib.sha256(text.encode()).hexdigest(),
        )

    kb = KnowledgeBase(ws, hashing_router(), qdrant_url=qdrant)
    kb.ingest_documents([doc(i, 1) for i in range(30)])

    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "before_upsert":  # the replaced points are deleted, the new ones not written
        def upsert(self, points):
            die()
        from shelfhand.knowledge.stores.qdrant.edge import EdgeBackend
        EdgeBackend.upsert = upsert
    else:  # after_apply: the shard has the new points, the outbox rows are not acknowledged
        real_apply = QdrantIndex.apply
        def apply(self, store, changes):
            real_apply(self, store, changes)
            die()
        QdrantIndex.apply = apply
    kb.ingest_documents([doc(i, 2) for i in range(40)])
    print("not killed")
    """
)


@pytest.mark.parametrize("point", ["before_upsert", "after_apply"])
def test_a_write_killed_mid_way_is_replayed_on_the_next_open(tmp_path: Path, point: str) -> None:
    ws, qdrant = tmp_path / "ws", tmp_path / "qdrant"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(ws), str(qdrant), point],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    kb = KnowledgeBase(ws, hashing_router(), qdrant_url=str(qdrant))
    try:
        texts = {s.chunk.doc_id: s.chunk.text for s in kb._stack.store.iter_chunks()}
        assert len(texts) >= 30  # the first version, at least, was stored
        # the kill came before the second version's embeddings: they wait, as after any
        # interrupted ingest, for `shelfhand embed`
        assert kb.pending_embeddings() == len(texts) - 15
        kb.embed_pending()
        assert kb.pending_embeddings() == 0
        found = 0
        for i in range(40):
            for word in (f"old{i}x", f"new{i}y"):
                if word not in texts.get(f"d{i}", ""):
                    continue  # replaced, or never stored
                for mode in ("keyword", "hybrid"):
                    hits = kb.search(word, k=3, mode=mode)
                    assert hits and hits[0].chunk.doc_id == f"d{i}", (word, mode, hits)
                    found += 1
        assert found >= 60  # each of the 30 first documents in both modes, at least
        # a point for every stored chunk, with its vector; none of a replaced chunk left
        assert kb._stack.vectors.count() == kb.count_chunks() == len(texts)
    finally:
        kb.close()
