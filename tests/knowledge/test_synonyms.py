"""Query synonyms: a word people ask with that the documents write differently (开封 for
拆封: jieba reads 开封 as the city) still finds the passage; a workspace adds its own groups
with the ``synonyms`` setting; the index is not touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelfhand.agent.extractive import extractive_answer
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.settings import Settings
from shelfhand.knowledge import KnowledgeBase
from shelfhand.knowledge.analysis import (
    synonym_candidates,
    synonym_table,
    tokenize_for_index,
    tokenize_query,
    with_synonyms,
)
from shelfhand.testing import hashing_router
from support.knowledge import sample_kb

OPENED = "开封后的投影仪可以退货吗？"
ACME = UserContext(tenant_id="acme", user_id="u1")
SHIPPING = "# 配送\n\n订单在下单后 48 小时内由顺丰发出。\n"
ASKED = "快递多久寄出？"  # the documents say 顺丰 and 发出
WHEN_SHIPPED = "订单寄出时间"  # 寄出 read as the documents' 发出 makes 2 of its 3 words found


def test_a_word_no_document_holds_is_searched_as_its_synonym_that_they_hold() -> None:
    table = synonym_table()
    tokens = tokenize_query(OPENED)
    words = synonym_candidates(tokens, table)

    assert words == ["开封", "拆封"] and "开封" not in tokenize_for_index("已拆封的商品")
    swapped = with_synonyms(tokens, table, {"拆封": 2, "退货": 5})
    assert swapped == [("拆封" if t == "开封" else t) for t in tokens]
    # the documents hold the asked word, or none holds a synonym: it stays
    assert with_synonyms(tokens, table, {"开封": 1, "拆封": 2}) == tokens
    assert with_synonyms(tokens, table, {}) == tokens


def test_groups_are_read_in_the_index_s_own_tokens() -> None:
    table = synonym_table([("Refunds", "money back"), ("寄出", "发出")])

    assert table["refund"] == ("money", "back")  # stemmed; a phrase is added by its words
    assert "money back" not in table and table["寄出"] == ("发出",)


def test_a_query_without_synonyms_has_no_candidates() -> None:
    assert synonym_candidates(tokenize_query("E-203 是什么故障？"), synonym_table()) == []


@pytest.mark.parametrize("vectors", [False, True], ids=["keyword", "hybrid"])
def test_opened_finds_the_passage_on_opened_goods(tmp_path: Path, vectors: bool) -> None:
    with sample_kb(tmp_path, vectors=vectors) as kb:
        hits = kb.search(OPENED, k=5, user=ACME, mode="hybrid" if vectors else "keyword")

    headings = [h.chunk.section_path for h in hits]
    top_two = [" › ".join(p) for p in headings[:2]]
    assert any("已拆封商品" in h for h in top_two), headings


def test_a_workspace_adds_its_own_groups(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "shipping.md").write_text(SHIPPING, encoding="utf-8")
    (docs / "warranty.md").write_text("# 保修\n\n整机保修 24 个月。\n", encoding="utf-8")
    plain = Settings.load(tmp_path / "plain", env={"SHELFHAND_RETRIEVAL_MODE": "keyword"})
    extended = Settings.load(
        tmp_path / "ext",
        env={"SHELFHAND_RETRIEVAL_MODE": "keyword", "SHELFHAND_SYNONYMS": "寄出 发出;快递 顺丰"},
    )
    found = {}
    for name, settings in (("plain", plain), ("extended", extended)):
        with App(settings=settings).open_knowledge(writer="test") as kb:
            kb.ingest([docs])
            found[name] = kb.search(ASKED, mode="keyword")

    assert settings.synonyms == (("寄出", "发出"), ("快递", "顺丰"))
    assert found["plain"] == [] and found["extended"][0].chunk.source.endswith("shipping.md")


def test_a_group_of_one_word_fails_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="synonyms must be groups of two or more"):
        Settings.load(tmp_path, env={"SHELFHAND_SYNONYMS": "开封"})


def test_the_knowledge_base_takes_groups_from_code(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "shipping.md").write_text(SHIPPING, encoding="utf-8")
    with KnowledgeBase(tmp_path / "ws", hashing_router(), synonyms=[("寄出", "发出")]) as kb:
        kb.ingest([docs])
        hits = kb.search(ASKED, mode="keyword")

    assert hits and hits[0].chunk.source.endswith("shipping.md")


def test_a_workspace_s_groups_reach_the_extractive_answer(tmp_path: Path) -> None:
    """The answer without a model reads the question with the same groups as the search: the
    shipping passage found through 寄出 = 发出 is quoted, not "the documents do not cover
    this"."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "shipping.md").write_text(SHIPPING, encoding="utf-8")
    env = {"SHELFHAND_RETRIEVAL_MODE": "keyword", "SHELFHAND_SYNONYMS": "寄出 发出"}
    app = App(settings=Settings.load(tmp_path / "ws", env=env))
    with app.open_knowledge(writer="test") as kb:
        kb.ingest([docs])
        answered = app.knowledge_agent(kb).run_sync(WHEN_SHIPPED)
        passages = answered.citations
    built_in_only = extractive_answer(WHEN_SHIPPED, passages)
    with_groups = extractive_answer(WHEN_SHIPPED, passages, synonyms=app.synonym_table())

    assert answered.extractive and "48 小时" in answered.output
    assert built_in_only is None and with_groups is not None
    assert with_groups.text == answered.output
