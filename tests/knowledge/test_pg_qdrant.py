"""PostgreSQL with Qdrant serving the searches keeps the records only: no keyword fields, no
term statistics. Removing ``qdrant_url`` later gives keyword searches that refuse with the fix
(never results missing the chunks stored meanwhile), until ``shelfhand knowledge reindex``
indexes those chunks in PostgreSQL. On a real PostgreSQL (``pg_url``)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_qdrant import ACME, CORPUS, GLOBEX, doc

from shelfhand.core.errors import ConfigurationError
from shelfhand.knowledge import KnowledgeBase
from support.cli import run_cli

pytest.importorskip("qdrant_edge")


def stats(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        fields = {
            str(f): int(d)
            for f, d in conn.execute("SELECT field, docs FROM knowledge_pg_field_stats")
        }
        (terms,) = conn.execute("SELECT count(*) FROM knowledge_pg_tenant_terms").fetchone() or (0,)
        (analysed,) = conn.execute(
            "SELECT count(*) FROM knowledge_pg_chunks WHERE body_len >= 0 AND body <> ''"
        ).fetchone() or (0,)
        (chunks,) = conn.execute("SELECT count(*) FROM knowledge_pg_chunks").fetchone() or (0,)
    return {"fields": fields, "terms": int(terms), "analysed": int(analysed), "chunks": chunks}


def with_qdrant(tmp_path: Path, url: str) -> KnowledgeBase:
    return KnowledgeBase(tmp_path / "ws", None, database_url=url, qdrant_url=str(tmp_path / "q"))


def test_with_qdrant_postgresql_keeps_no_keyword_fields_and_qdrant_still_finds_everything(
    tmp_path: Path, pg_url: str
) -> None:
    kb = with_qdrant(tmp_path, pg_url)
    try:
        kb.ingest_documents(CORPUS)
        assert kb.search("What does E-203 mean?", k=3, user=ACME)[0].chunk.doc_id == "faults.md"
        assert kb.search("长江大桥", k=3, user=ACME)[0].chunk.doc_id == "bridge.md"
        assert [h.chunk.doc_id for h in kb.search("E-203", k=5, user=GLOBEX)] == ["other.md"]
    finally:
        kb.close()
    s = stats(pg_url)
    assert s["chunks"] > 0 and s["analysed"] == 0 and s["terms"] == 0
    assert s["fields"]["u"] == s["chunks"]
    assert s["fields"]["b"] == s["fields"]["h"] == s["fields"]["c"] == 0


def test_without_qdrant_later_keyword_search_refuses_until_reindex_indexes_the_chunks(
    tmp_path: Path, pg_url: str
) -> None:
    first = KnowledgeBase(tmp_path / "pg", None, database_url=pg_url)  # SQL search, analysed
    first.ingest_documents(CORPUS[:2])
    first.close()
    kb = with_qdrant(tmp_path, pg_url)
    kb.ingest_documents(CORPUS[2:])  # stored while Qdrant serves the searches
    kb.forget("fan.md")  # an analysed document leaves the statistics
    kb.close()
    before = stats(pg_url)
    assert before["fields"]["u"] == before["chunks"] - 1  # faults.md's one chunk is analysed
    assert before["fields"]["b"] == 1

    plain = KnowledgeBase(tmp_path / "pg", None, database_url=pg_url)
    try:
        with pytest.raises(ConfigurationError, match="shelfhand knowledge reindex"):
            plain.search("长江大桥", k=3, user=ACME)
        assert plain.index_pg_keywords() == before["fields"]["u"]
        assert plain.index_pg_keywords() == 0  # nothing left
        assert plain.search("长江大桥", k=3, user=ACME)[0].chunk.doc_id == "bridge.md"
        assert plain.search("What does E-203 mean?", k=3, user=ACME)[0].chunk.doc_id == (
            "faults.md"
        )
        assert [h.chunk.doc_id for h in plain.search("E-203", k=5, user=GLOBEX)] == ["other.md"]
    finally:
        plain.close()
    after = stats(pg_url)
    assert after["fields"]["u"] == 0 and after["analysed"] == after["chunks"]
    assert after["fields"]["b"] == after["chunks"] and after["terms"] > 0


def test_the_statistics_after_a_reindex_equal_those_of_a_store_that_always_analysed(
    tmp_path: Path, pg_url: str, pg_server: Any
) -> None:
    other = pg_server.create_database(f"t_{tmp_path.name[-20:].replace('-', '_')}_ref")
    try:
        reference = KnowledgeBase(tmp_path / "ref", None, database_url=other)
        reference.ingest_documents(CORPUS)
        reference.close()
        kb = with_qdrant(tmp_path, pg_url)
        kb.ingest_documents([*CORPUS, doc("gone.md", "Gone", "E-999 长江 once.")])
        kb.forget("gone.md")  # a chunk never analysed leaves the count
        kb.close()
        plain = KnowledgeBase(tmp_path / "pg", None, database_url=pg_url)
        plain.index_pg_keywords()
        plain.close()
        queries = (
            "SELECT field, docs, tokens FROM knowledge_pg_field_stats ORDER BY field",
            "SELECT tenant_id, field, term, df FROM knowledge_pg_tenant_terms WHERE df <> 0"
            " ORDER BY tenant_id, field, term",
            "SELECT * FROM knowledge_pg_tenant_stats WHERE docs <> 0 OR tokens <> 0"
            " ORDER BY tenant_id, field",
        )
        for sql in queries:
            with psycopg.connect(pg_url) as a, psycopg.connect(other) as b:
                assert a.execute(sql).fetchall() == b.execute(sql).fetchall()
    finally:
        pg_server.drop_database(other.rsplit("/", 1)[-1].split("?")[0])


@pytest.mark.slow
def test_the_cli_reindex_indexes_in_postgresql_what_was_stored_for_qdrant(
    tmp_path: Path, pg_url: str
) -> None:
    def cli(*args: str, qdrant: bool) -> subprocess.CompletedProcess[str]:
        more = {"SHELFHAND_QDRANT_URL": str(tmp_path / "q")} if qdrant else {}
        return run_cli(list(args), tmp_path / "ws", SHELFHAND_DATABASE_URL=pg_url, **more)

    assert cli("ingest", "--samples", "--no-queue", qdrant=True).returncode == 0
    refused = cli("search", "E-203", qdrant=False)
    assert refused.returncode != 0 and "shelfhand knowledge reindex" in refused.stderr
    assert "Traceback" not in refused.stderr
    out = cli("reindex", qdrant=False)
    assert out.returncode == 0, out.stderr
    assert "PostgreSQL keyword index:" in out.stdout and "chunks indexed" in out.stdout
    found = cli("search", "E-203", "--json", qdrant=False)
    assert found.returncode == 0, found.stderr
    assert "E-203" in found.stdout


def test_a_hybrid_search_looks_for_other_processes_writes_once_and_finds_them(
    tmp_path: Path, pg_url: str
) -> None:
    from shelfhand.testing import hashing_router

    kb = KnowledgeBase(
        tmp_path / "ws", hashing_router(), database_url=pg_url, qdrant_url=str(tmp_path / "q")
    )
    try:
        kb.ingest_documents(CORPUS)
        once = kb._stack.keyword.index._refresh  # type: ignore[attr-defined]
        looks: list[int] = []
        check = once._check

        def counted() -> None:
            looks.append(1)
            check()

        once._check = counted
        # another process's store (a worker: no Qdrant index of its own) writes a document
        worker = KnowledgeBase(tmp_path / "worker", hashing_router(), database_url=pg_url)
        try:
            worker.ingest_documents([doc("lens.md", "Lens", "E-777 means the lens cover is shut.")])
        finally:
            worker.close()
        for _ in range(3):
            hits = kb.search("What does E-777 mean?", k=3, user=ACME, mode="hybrid")
            assert hits[0].chunk.doc_id == "lens.md"  # written by the other store, found
        assert len(looks) == 3  # one look per search (keyword, vector and exact sides)
    finally:
        kb.close()
