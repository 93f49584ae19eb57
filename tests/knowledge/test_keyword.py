"""Text analysis and BM25 keyword search with the permission filter inside the query."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from shelfhand.knowledge.analysis import tokenize_for_index, tokenize_query
from shelfhand.knowledge.stores.sqlite import SqliteKnowledgeStore
from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex
from shelfhand.knowledge.types import Chunk, Document, Scope, Section


def add(
    store: SqliteKnowledgeStore,
    doc_id: str,
    text: str,
    *,
    tenant: str = "default",
    tags: tuple[str, ...] = (),
    doc_type: str = "markdown",
) -> int:
    doc = Document(
        doc_id=doc_id,
        source=doc_id,
        title="",
        doc_type=doc_type,
        sections=(Section(text=text),),
        content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        permission_tags=tags,
        tenant_id=tenant,
    )
    chunk = Chunk(
        chunk_id=f"{doc_id}::0",
        doc_id=doc_id,
        chunk_index=0,
        text=text,
        title="",
        section_path=(),
        page=None,
        source=doc_id,
        start=0,
        end=len(text),
        content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        doc_type=doc_type,
        permission_tags=tags,
        tenant_id=tenant,
    )
    return store.upsert_document(doc, [chunk])[0]


@pytest.fixture
def store(tmp_path: Path) -> SqliteKnowledgeStore:
    s = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    s.attach(TantivyKeywordIndex(tmp_path / "keyword"))
    yield s
    s.close()


def keyword(store: SqliteKnowledgeStore) -> TantivyKeywordIndex:
    [index] = store._indexes
    assert isinstance(index, TantivyKeywordIndex)
    return index


def search(store: SqliteKnowledgeStore, query: str, **acl: Any) -> list[str]:
    hits = keyword(store).search(tokenize_query(query), 10, scope=Scope(**acl))
    return [c.doc_id for c in store.chunks_by_rowids([r for r, _ in hits])]


def test_english_is_stemmed_and_stopwords_dropped() -> None:
    assert tokenize_for_index("The Warranties") == ["warranti"]
    assert tokenize_query("warranty") == ["warranti"]


def test_chinese_is_segmented_into_words_and_their_parts() -> None:
    assert {"保修", "保修期"} <= set(tokenize_for_index("保修期为12个月"))
    assert {"保修", "保修期"} <= set(tokenize_query("保修期是多久"))
    assert "的" not in tokenize_query("投影仪的保修期")


def test_codes_are_kept_whole_and_by_their_meaningful_parts() -> None:
    tokens = tokenize_for_index("错误 E-203，型号 ＳＫＵ2024-011")
    assert {"e-203", "e203", "sku2024-011", "sku2024"} <= set(tokens)
    assert not {"e", "203", "011"} & set(tokens)


def test_warranties_finds_a_document_about_the_warranty(store: SqliteKnowledgeStore) -> None:
    add(store, "warranty", "The warranty covers the lamp for one year.")
    add(store, "returns", "Returns are accepted within seven days.")
    assert search(store, "warranties") == ["warranty"]


def test_a_chinese_query_finds_a_segmented_chinese_document(store: SqliteKnowledgeStore) -> None:
    add(store, "zh-warranty", "投影仪保修期为12个月，人为损坏不在保修范围内。")
    add(store, "zh-returns", "拆封后7天内可以无理由退货。")
    assert search(store, "保修期") == ["zh-warranty"]
    assert search(store, "拆封后还能退货吗")[0] == "zh-returns"


def test_an_exact_code_ranks_above_its_scattered_parts(store: SqliteKnowledgeStore) -> None:
    add(store, "parts", "Section E of the manual, page 203, and more about E and 203.")
    add(store, "code", "Error E-203 means the lamp is overheating.")
    assert search(store, "E-203 是什么故障？")[0] == "code"


def test_terms_no_chunk_holds_change_nothing_and_alone_find_nothing(
    store: SqliteKnowledgeStore,
) -> None:
    add(store, "warranty", "The warranty covers the lamp for one year.")
    add(store, "lamp", "The lamp of the projector lasts 3000 hours.")
    index = keyword(store)
    known = index.search(tokenize_query("lamp warranty"), 5, scope=Scope())
    assert len(known) == 2
    # the query's terms no chunk has get no clause: same hits, same scores
    more = tokenize_query("lamp warranty zyxwvut qqqzzz")
    assert index.search(more, 5, scope=Scope()) == known
    before = index.paths["empty"]
    assert index.search(["zyxwvut", "qqqzzz"], 5, scope=Scope()) == []
    assert index.paths["empty"] == before + 1


def test_query_syntax_in_user_text_is_just_words(store: SqliteKnowledgeStore) -> None:
    add(store, "a", "title body AND OR NOT")
    assert search(store, 'title:foo AND (bar OR "baz') == ["a"]
    assert search(store, ")(*&^%$#@!") == []
    assert search(store, "") == []


def test_other_tenants_and_tagged_chunks_are_filtered_inside_the_query(
    store: SqliteKnowledgeStore,
) -> None:
    add(store, "public", "price list")
    add(store, "sales-only", "price list internal", tags=("sales",))
    add(store, "acme", "price list", tenant="acme")
    assert search(store, "price") == ["public"]
    assert sorted(search(store, "price", roles=("sales",))) == ["public", "sales-only"]
    assert sorted(search(store, "price", roles=("admin",))) == ["public", "sales-only"]
    assert search(store, "price", tenant_id="acme", roles=("sales",)) == ["acme"]
    assert search(store, "price", tenant_id="nobody", roles=("system",)) == []


def test_doc_type_and_source_filters_are_part_of_the_query(store: SqliteKnowledgeStore) -> None:
    add(store, "a.md", "lamp", doc_type="markdown")
    add(store, "b.pdf", "lamp", doc_type="pdf")
    assert search(store, "lamp", doc_types=["pdf"]) == ["b.pdf"]
    assert search(store, "lamp", sources=["a.md"]) == ["a.md"]


def test_deleted_and_replaced_documents_leave_the_index(store: SqliteKnowledgeStore) -> None:
    add(store, "a", "projector lamp")
    add(store, "a", "projector fan")
    add(store, "b", "projector lamp")
    store.delete_document("b")
    assert search(store, "lamp") == []
    assert search(store, "fan") == ["a"]
    assert keyword(store).num_docs() == 1


def _hr_may_read(index: TantivyKeywordIndex, rowid: int) -> bool | None:
    labels = index._labels
    assert labels is not None
    allowed = labels.allows([rowid], Scope(tenant_id="acme", roles=["hr"]))
    return None if allowed is None else allowed[0]


def _no_tantivy_check(*args: object) -> list[bool]:
    raise AssertionError("the writer's labels should have answered")


def test_the_writer_checks_hits_against_labels_saved_with_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    store.attach(TantivyKeywordIndex(tmp_path / "keyword"))
    hr = add(store, "hr", "保修 warranty for staff", tenant="acme", tags=("hr",))
    sales = add(store, "sales", "保修 warranty for customers", tenant="acme", tags=("sales",))
    store.close()
    assert (tmp_path / "keyword" / "labels" / "labels.npz").exists()

    again = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    index = TantivyKeywordIndex(tmp_path / "keyword")
    assert index._labels is not None  # loaded with the index, not read from the store
    again.attach(index)
    assert _hr_may_read(index, hr) is True and _hr_may_read(index, sales) is False
    monkeypatch.setattr(index, "_check", _no_tantivy_check)
    assert search(again, "保修 warranty", tenant_id="acme", roles=["hr"]) == ["hr"]
    assert index.paths["oversampled"] == 1  # the unfiltered ranking, checked by the labels

    # a document's tags change: the writer's labels follow before the next search
    add(again, "sales", "保修 warranty for customers", tenant="acme", tags=("hr",))
    assert sorted(search(again, "保修 warranty", tenant_id="acme", roles=["hr"])) == [
        "hr",
        "sales",
    ]
    assert search(again, "warranty", tenant_id="acme", roles=["sales"]) == []
    assert search(again, "warranty", tenant_id="default", roles=["admin"]) == []
    again.close()


@pytest.mark.parametrize("damage", ["state", "stale"])
def test_missing_or_stale_labels_are_rebuilt_from_the_store(tmp_path: Path, damage: str) -> None:
    store = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    store.attach(TantivyKeywordIndex(tmp_path / "keyword"))
    rowid = add(store, "hr", "warranty for staff", tenant="acme", tags=("hr",))
    store.close()
    state = tmp_path / "keyword" / "labels" / "shelfhand-state.json"
    if damage == "state":  # a process that stopped while saving, or an index from before
        state.unlink()
    else:  # labels of an older generation than the index
        state.write_text('{"generation": 0}', encoding="utf-8")

    again = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    index = TantivyKeywordIndex(tmp_path / "keyword")
    assert index._labels is None
    again.attach(index)  # the writer labels every chunk from the store, once
    assert _hr_may_read(index, rowid) is True
    assert search(again, "warranty", tenant_id="acme", roles=["hr"]) == ["hr"]
    assert search(again, "warranty", tenant_id="acme", roles=["sales"]) == []
    again.close()
    assert state.exists()


def test_a_reading_process_checks_hits_with_tantivy(tmp_path: Path) -> None:
    store = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    store.attach(TantivyKeywordIndex(tmp_path / "keyword"))
    add(store, "hr", "warranty for staff", tenant="acme", tags=("hr",))
    add(store, "pub", "warranty for everyone", tenant="acme")
    reader = TantivyKeywordIndex(tmp_path / "keyword", access="read-only")
    assert reader._labels is None  # it cannot see the writer's later labels
    hits = reader.search(tokenize_query("warranty"), 5, scope=Scope(tenant_id="acme"))
    assert [c.doc_id for c in store.chunks_by_rowids([r for r, _ in hits])] == ["pub"]
    assert reader.paths["oversampled"] == 1
    store.close()


def test_a_rebuild_leaves_one_segment_and_the_same_results(tmp_path: Path) -> None:
    store = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    index = TantivyKeywordIndex(tmp_path / "keyword")
    store.attach(index)
    for batch in range(4):  # every commit writes a segment
        for i in range(5):
            tags = ("hr",) if i % 2 else ()
            filler = " filler" * (batch * 5 + i)  # distinct lengths: no tied scores
            add(store, f"d{batch}-{i}", f"保修 warranty part{i} batch{batch}{filler}", tags=tags)
        store.sync(durable=True)
    assert index.segments() > 1
    queries = ["warranty part1", "保修 batch2", "part3"]
    callers = [Scope(tenant_id="default", roles=()), Scope(tenant_id="default", roles=("hr",))]

    def results() -> list[list[tuple[int, float]]]:
        return [index.search(tokenize_query(q), 10, scope=c) for q in queries for c in callers]

    before = results()
    store.rebuild_indexes([index.name])
    assert index.segments() == 1
    assert results() == before
    add(store, "late", "warranty part1 late")  # the writer goes on after the rebuild
    store.sync()
    assert "late" in search(store, "late warranty")
    store.close()


def test_a_failed_rebuild_keeps_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    store.attach(TantivyKeywordIndex(tmp_path / "keyword"))
    add(store, "a", "warranty two years")
    add(store, "b", "保修两年", tags=("hr",))
    store.sync(durable=True)

    def broken(*args: object) -> object:
        yield from ()
        raise OSError("disk went away")

    monkeypatch.setattr(store, "iter_chunks", broken)
    with pytest.raises(OSError, match="disk went away"):
        store.rebuild_indexes(["keyword"])
    monkeypatch.undo()
    assert search(store, "warranty") == ["a"]
    assert search(store, "保修") == []  # the labels still hide the hr chunk
    assert search(store, "保修", roles=("hr",)) == ["b"]
    store.close()
