"""A Chinese word jieba's dictionary lacks (``年假``) is searched as its characters (``年``,
``假``); a passage holding only the commonest of them ("2025 年 1 月 1 日") was a keyword hit,
and ``shelfhand search 年假`` over the projector samples listed the warranty policy. Such a
hit is now dropped unless its text holds the word whole, another word of the query, or the
characters that weigh most (a rare one: "䲟又叫做什么？" still finds the passage on 䲟), or
its vectors are close enough on their own."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from shelfhand import UserContext
from shelfhand.knowledge import KnowledgeBase, sample_corpus
from shelfhand.knowledge.analysis import split_words, tokenize_query
from shelfhand.knowledge.embeddings.local import default_router
from support.knowledge import sample_kb, text_document

ACME = UserContext(tenant_id="acme", user_id="alice")
GLOBEX = UserContext(tenant_id="globex", user_id="bob")
HANDBOOK = "员工手册：入职满一年的员工每年享有年假 5 天，年假需提前一周申请。"


@pytest.fixture(params=[True, False], ids=["hashing-vectors", "keyword-only"])
def kb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path, vectors=request.param) as base:
        yield base


def test_split_words() -> None:
    assert split_words(tokenize_query("年假"), "年假") == ("年假",)
    assert split_words(tokenize_query("公司的年假政策是什么？"), "公司的年假政策是什么？") == (
        "年假",
    )
    assert split_words(tokenize_query("保修期多久？"), "保修期多久？") == ()
    assert split_words(tokenize_query("warranty of E-203"), "warranty of E-203") == ()
    # characters next to each other in the tokens but not in the question: not a word
    assert split_words(["年", "假"], "年，假") == ()


def ids(
    kb: KnowledgeBase,
    query: str,
    user: UserContext = ACME,
    mode: str = "hybrid",
    floor: float = 0.25,
) -> list[str]:
    """The documents of the hits, at the app's relevance floor (``min_relevance``)."""
    options = replace(kb.search_options, min_relevance=floor)
    found = kb.search_result(query, k=5, user=user, mode=mode, options=options)  # type: ignore[arg-type]
    return [h.chunk.doc_id for h in found.hits]


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_a_word_the_documents_lack_finds_nothing(kb: KnowledgeBase, mode: str) -> None:
    assert ids(kb, "年假", mode=mode) == []
    assert ids(kb, "年假", mode=mode, floor=0) != []  # every hit asked for: every hit
    # the same documents still answer what they hold
    assert any("warranty" in d for d in ids(kb, "保修期多久？", mode=mode))
    # a word of the query the passage holds keeps it (the warranty *policy* for 政策)
    assert any("warranty" in d for d in ids(kb, "年假政策", mode=mode))


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_a_passage_holding_the_word_whole_or_its_rare_character_is_found(
    kb: KnowledgeBase, mode: str
) -> None:
    kb.ingest_documents(
        [
            text_document("hr/handbook.md", HANDBOOK, title="员工手册", tenant_id="acme"),
            text_document(
                "fish/remora.md",
                "短䲟（学名 Remora remora），又称印头鱼，吸附在鲨鱼身上。",
                title="短䲟",
                tenant_id="acme",
            ),
        ]
    )
    assert ids(kb, "年假", mode=mode)[0] == "hr/handbook.md"
    assert "fish/remora.md" in ids(kb, "䲟又叫做什么？", mode=mode)


@pytest.mark.slow
def test_with_the_packaged_embedders_a_word_the_documents_lack_finds_nothing(
    tmp_path: Path,
) -> None:
    kb = KnowledgeBase(tmp_path / "ws", default_router())
    try:
        kb.ingest([sample_corpus()], tenant_id="acme")
        assert ids(kb, "年假") == []
        kb.ingest_documents(
            [text_document("hr/handbook.md", HANDBOOK, title="员工手册", tenant_id="acme")]
        )
        assert ids(kb, "年假")[0] == "hr/handbook.md"
    finally:
        kb.close()


def test_two_tenants_at_once_each_get_their_own(tmp_path: Path) -> None:
    """Both tenants hold the samples; only acme holds the handbook: acme's searches find it,
    globex's find nothing (not the warranty's "2025 年", not acme's handbook)."""
    with sample_kb(tmp_path, vectors=False) as kb:
        kb.ingest([sample_corpus()], tenant_id="globex")
        kb.ingest_documents(
            [text_document("hr/handbook.md", HANDBOOK, title="员工手册", tenant_id="acme")]
        )
        with ThreadPoolExecutor(4) as pool:
            runs = [pool.submit(ids, kb, "年假", user) for user in (ACME, GLOBEX) * 10]
            found = [run.result() for run in runs]
        assert found[0::2] == [["hr/handbook.md"]] * 10
        assert found[1::2] == [[]] * 10
