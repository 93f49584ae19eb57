"""One writer per workspace: a second writer gets a clear message (or waits), never a traceback."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shelfhand.app import App
from shelfhand.core.errors import WorkspaceBusyError
from shelfhand.core.settings import Settings
from shelfhand.knowledge.stack import open_embedded_store
from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex
from shelfhand.knowledge.stores.workspace_lock import WorkspaceLock
from shelfhand.knowledge.types import Scope
from support.knowledge import text_document

BUSY = 75


def cli(*args: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env["SHELFHAND_EMBEDDER"] = "hashing"
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args, "-w", str(workspace)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
    )


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "returns.md").write_text("# 退货政策\n\n拆封后 7 天内可退。", encoding="utf-8")
    (folder / "faq.md").write_text("# FAQ\n\nError E-203 means the filter is clogged.", "utf-8")
    return folder


def test_a_second_writer_is_told_who_holds_the_workspace(tmp_path: Path) -> None:
    with WorkspaceLock(tmp_path, "ingest"):
        with pytest.raises(WorkspaceBusyError) as busy:
            WorkspaceLock(tmp_path, "ingest").acquire()
        assert str(busy.value) == (
            f"another ingest (PID {os.getpid()}) is running on workspace {tmp_path}: "
            "wait for it to finish, or pass --wait SECONDS"
        )
        assert (busy.value.holder, busy.value.pid) == ("ingest", os.getpid())
        with pytest.raises(WorkspaceBusyError, match="wait for it to finish, then start"):
            WorkspaceLock(tmp_path, "serve").acquire()
    served = r"served by PID \d+ .*upload through the API"
    with WorkspaceLock(tmp_path, "serve"), pytest.raises(WorkspaceBusyError, match=served):
        WorkspaceLock(tmp_path, "ingest").acquire()
    WorkspaceLock(tmp_path, "ingest").acquire().release()  # free again


def test_a_waiting_writer_gets_the_lock_when_the_holder_lets_go(tmp_path: Path) -> None:
    holder = WorkspaceLock(tmp_path, "ingest").acquire()
    told: list[str] = []
    waiting = threading.Event()

    def on_wait(message: str) -> None:
        told.append(message)
        waiting.set()

    got: list[WorkspaceLock] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            WorkspaceLock(tmp_path, "ingest").acquire(wait=30, on_wait=on_wait)
        )
    )
    waiter.start()
    assert waiting.wait(10)
    holder.release()
    waiter.join(30)
    assert got and got[0].held
    assert told == [
        f"another ingest (PID {os.getpid()}) is running on workspace {tmp_path}: "
        "wait for it to finish, or pass --wait SECONDS"
    ]
    got[0].release()


def test_a_knowledge_base_opened_as_writer_holds_the_lock_until_closed(tmp_path: Path) -> None:
    app = App(settings=Settings.load(tmp_path / "ws", env={"SHELFHAND_RETRIEVAL_MODE": "keyword"}))
    kb = app.open_knowledge(writer="ingest")
    with pytest.raises(WorkspaceBusyError):
        app.open_knowledge(writer="forget")
    reader = app.open_knowledge()  # read-only use needs no lock
    reader.close()
    kb.close()
    app.open_knowledge(writer="forget").close()


@pytest.mark.slow
def test_a_second_cli_ingest_exits_cleanly_with_the_busy_code(tmp_path: Path, docs: Path) -> None:
    ws = tmp_path / "ws"
    first = cli("ingest", str(docs), workspace=ws)
    assert first.returncode == 0, first.stderr
    assert "2 added" in first.stdout
    with WorkspaceLock(ws, "ingest"):  # as another ingest would
        for args in (("ingest", str(docs)), ("forget", "docs/")):
            result = cli(*args, workspace=ws)
            assert result.returncode == BUSY, result.stderr
            said = " ".join(result.stderr.split())  # rich wraps long lines
            assert f"another ingest (PID {os.getpid()}) is running" in said
            assert "Traceback" not in result.stderr + result.stdout
    again = cli("ingest", str(docs), workspace=ws)
    assert again.returncode == 0, again.stderr
    assert "2 unchanged" in again.stdout


def keyword_app(workspace: Path) -> App:
    return App(settings=Settings.load(workspace, env={"SHELFHAND_RETRIEVAL_MODE": "keyword"}))


def test_a_reader_opened_while_another_writes_never_touches_the_index_and_sees_its_commits(
    tmp_path: Path, docs: Path
) -> None:
    ws = tmp_path / "ws"
    lock = WorkspaceLock(ws, "ingest").acquire()  # the writing "process"
    writer = open_embedded_store(ws, None)
    try:
        writer.ingestor.ingest([docs])
        (docs / "new.md").write_text("# 新品\n\nXylophone mode ships today.", encoding="utf-8")
        with writer.store.deferred_sync():  # mid-ingest: committed to SQLite, index pending
            writer.ingestor.ingest([docs])
            assert writer.store.pending_changes()
            reader = keyword_app(ws).open_knowledge()  # used to fail: tantivy LockBusy
            assert reader.search("E-203", mode="keyword")
            assert not reader.search("xylophone", mode="keyword")  # not in the index yet
        # the writer's commit is visible to the reader at once (its searcher reloads)
        hits = reader.search("xylophone", mode="keyword")
        assert [h.chunk.source for h in hits] == ["docs/new.md"]
        reader.close()
    finally:
        writer.close()
        lock.release()


def test_a_reader_reloads_the_keyword_index_once_per_search(tmp_path: Path, docs: Path) -> None:
    ws = tmp_path / "ws"
    lock = WorkspaceLock(ws, "ingest").acquire()  # another process writes
    writer = open_embedded_store(ws, None)
    try:
        writer.ingestor.ingest([docs])
        reader = keyword_app(ws).open_knowledge()
        index = reader._stack.keyword
        assert isinstance(index, TantivyKeywordIndex) and index.access != "write"
        before = index.reloads
        # the keyword side and the exact-identifier step: one reload between them
        assert reader.search("E-203 error", mode="keyword")[0].chunk.source == "docs/faq.md"
        assert index.reloads == before + 1
        # outside a search (no search_start) each look checks for a commit: none came, so
        # neither reloads (the searcher, and the tenants' counts, are kept)
        tokens = ["e-203"]
        index.search(tokens, 3, scope=Scope(tenant_id="default"))
        index.search(tokens, 3, scope=Scope(tenant_id="default"))
        assert index.reloads == before + 1
        # a commit made before the next search is seen by it
        (docs / "new.md").write_text("# 新品\n\nXylophone mode ships today.", encoding="utf-8")
        writer.ingestor.ingest([docs])
        assert [h.chunk.source for h in reader.search("xylophone", mode="keyword")] == [
            "docs/new.md"
        ]
        assert index.reloads == before + 2
        # the term statistics (synonyms, relevance) read the same commit as the search
        (docs / "newer.md").write_text("# 新品\n\nMarimba mode ships soon.", encoding="utf-8")
        writer.ingestor.ingest([docs])
        assert index.doc_freqs(["marimba"])[1] == [1]
        reader.close()
    finally:
        writer.close()
        lock.release()


def test_a_reader_ranks_each_tenant_by_the_writers_latest_commit(tmp_path: Path) -> None:
    """A reading process keeps a tenant's counts while the writer commits nothing, and counts
    anew once it has: over chunks of one word each, a one-word search scores the IDF of the
    caller's tenant's chunks at the writer's latest commit (see test_tenant_statistics.py),
    chunks deleted and not merged away yet left out."""
    ws = tmp_path / "ws"
    lock = WorkspaceLock(ws, "ingest").acquire()  # another process writes
    writer = open_embedded_store(ws, None)
    try:
        words = ["lamp", "fan", "fan", "fan"]
        writer.ingestor.ingest_documents(
            [text_document(f"t1/{i}.md", w, tenant_id="t1") for i, w in enumerate(words)]
            + [text_document(f"t2/{i}.md", "lamp", tenant_id="t2") for i in range(6)]
        )
        writer.store.sync()
        assert isinstance(writer.keyword, TantivyKeywordIndex)
        reader = TantivyKeywordIndex(writer.keyword.directory, access="read-only")
        t1 = Scope(tenant_id="t1")

        def score() -> float:
            hits = reader.search(["lamp"], 3, scope=t1)
            return max(s for _, s in hits)

        def idf(n: int, df: int) -> float:
            return math.log(1 + (n - df + 0.5) / (df + 0.5))

        assert score() == pytest.approx(idf(4, 1), rel=1e-5)
        reloads = reader.reloads
        assert score() == pytest.approx(idf(4, 1), rel=1e-5)
        assert reader.reloads == reloads  # nothing committed: nothing reloaded or counted
        writer.ingestor.ingest_documents([text_document("t1/4.md", "lamp", tenant_id="t1")])
        writer.store.sync()
        assert score() == pytest.approx(idf(5, 2), rel=1e-5)
        assert writer.store.delete_document("t1/1.md")  # a "fan": deleted, not merged away
        writer.store.sync()
        assert score() == pytest.approx(idf(4, 2), rel=1e-5)
        assert reader.reloads == reloads + 2
        reader.close()
    finally:
        writer.close()
        lock.release()


def test_two_tenants_search_a_reader_while_the_writer_commits(tmp_path: Path) -> None:
    """Callers of two tenants search one reading process's index at once while the writer
    commits three times: each gets its own tenant's chunks only, and once the writer is done
    the reader ranks as a reader opened afresh does (no counts kept from an older commit)."""
    ws = tmp_path / "ws"
    lock = WorkspaceLock(ws, "ingest").acquire()  # another process writes
    writer = open_embedded_store(ws, None)
    try:
        writer.ingestor.ingest_documents(
            [text_document(f"t1/{i}.md", f"lamp fan {i}", tenant_id="t1") for i in range(8)]
            + [text_document(f"t2/{i}.md", "lamp lamp", tenant_id="t2") for i in range(20)]
        )
        writer.store.sync()
        assert isinstance(writer.keyword, TantivyKeywordIndex)
        reader = TantivyKeywordIndex(writer.keyword.directory, access="read-only")
        wrong: list[tuple[str, str]] = []
        stop = threading.Event()

        def search(tenant: str) -> None:
            while not stop.is_set():
                hits = reader.search(["lamp"], 10, scope=Scope(tenant_id=tenant))
                for chunk in writer.store.chunk_map([r for r, _ in hits]).values():
                    if chunk.tenant_id != tenant:
                        wrong.append((tenant, chunk.doc_id))

        threads = [threading.Thread(target=search, args=(t,)) for t in ("t1", "t2")]
        for t in threads:
            t.start()
        for n in range(3):
            writer.ingestor.ingest_documents(
                [
                    text_document(f"t1/new{n}.md", "lamp", tenant_id="t1"),
                    text_document(f"t2/new{n}.md", "fan", tenant_id="t2"),
                ]
            )
            writer.store.sync()
        stop.set()
        for t in threads:
            t.join(30)
        assert wrong == []
        fresh = TantivyKeywordIndex(writer.keyword.directory, access="read-only")
        for tenant in ("t1", "t2"):
            scope = Scope(tenant_id=tenant)
            assert reader.search(["lamp"], 10, scope=scope) == fresh.search(
                ["lamp"], 10, scope=scope
            )
        fresh.close()
        reader.close()
    finally:
        writer.close()
        lock.release()


def test_a_reader_that_replays_an_interrupted_ingest_does_not_block_a_later_writer(
    tmp_path: Path, docs: Path
) -> None:
    ws = tmp_path / "ws"
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from shelfhand.knowledge.stack import open_embedded_store\n"
        "kb = open_embedded_store(Path(sys.argv[1]), None)\n"
        "with kb.store.deferred_sync():\n"
        "    kb.ingestor.ingest([Path(sys.argv[2])])\n"
        "    os._exit(0)  # dies with the keyword index behind SQLite\n"
    )
    subprocess.run([sys.executable, "-c", script, str(ws), str(docs)], check=True, timeout=120)
    reader = keyword_app(ws).open_knowledge()  # replays the outbox, then lets the writer go
    try:
        assert [h.chunk.source for h in reader.search("E-203", mode="keyword")] == ["docs/faq.md"]
        (docs / "new.md").write_text("# 新品\n\nXylophone mode ships today.", encoding="utf-8")
        writer = keyword_app(ws).open_knowledge(writer="ingest")
        report = writer.ingest([docs])  # used to fail: tantivy LockBusy held by the reader
        writer.close()
        assert report.added == ("docs/new.md",)
        assert [h.chunk.source for h in reader.search("xylophone", mode="keyword")] == [
            "docs/new.md"
        ]
    finally:
        reader.close()
