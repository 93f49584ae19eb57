"""A name jieba's HMM glued to the next character of a short question (``尚恩有`` from
"尚恩有什么爱好？", ``白岳峰现`` from "白岳峰现效力于哪支球队？") is searched as the name
the documents hold. Searched as guessed, it matched nothing and counted against every hit's
relevance: in a small workspace the right passage fell under the relevance floor and the
search found nothing (CMRC 2018, one passage a workspace: 24 of 152 questions with no hit
before, 19 after)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shelfhand import UserContext
from shelfhand.knowledge import KnowledgeBase
from shelfhand.knowledge.analysis import glued_candidates, tokenize_query, unglued
from support.knowledge import text_document

ACME = UserContext(tenant_id="acme", user_id="alice")
PEOPLE = {
    "尚恩.md": "尚恩，加拿大歌手，出生于多伦多，爱好摄影和滑雪。",
    "白岳峰.md": "白岳峰，中国足球运动员，司职后卫，现效力于大连一方。",
    "苏镜宇.md": "苏镜宇，原名苏博，中国足球运动员，2010年改名。",
}


def test_a_glued_word_is_searched_as_the_word_the_documents_hold() -> None:
    doc_freq = {
        **dict.fromkeys(["尚恩有", "恩有", "成苏镜宇", "成苏镜", "成苏", "镜宇"], 0),
        **dict.fromkeys(["公司总部", "公司总", "司总部"], 0),
        "尚恩": 3, "苏镜宇": 2, "公司": 40, "总部": 7, "投影仪": 9, "哪一年": 0,
    }  # fmt: skip
    tokens = ["尚恩有", "爱好", "成苏镜宇", "公司总部", "投影仪", "哪一年"]
    assert unglued(tokens, doc_freq) == [
        "尚恩",
        "爱好",
        "苏镜宇",
        "公司",
        "总部",
        "投影仪",
        "哪一年",
    ]
    # a part the query searches already is not searched twice
    assert unglued(["一年", "哪一年", "独立"], {"哪一年": 0, "哪一": 0, "一年": 50}) == [
        "一年",
        "独立",
    ]
    # two characters are left as they are: a word, or two characters the search holds already
    assert unglued(["恩有"], {"恩有": 0, "恩": 3}) == ["恩有"]


def test_only_chinese_words_of_three_characters_or_more_are_looked_into() -> None:
    assert glued_candidates(["尚恩有", "爱好", "e-203", "lumen"]) == ["尚恩有", "尚恩", "恩有"]
    assert glued_candidates(tokenize_query("warranty of the Lumen X1")) == []


@pytest.fixture
def people(tmp_path: Path) -> Iterator[KnowledgeBase]:
    """Keyword-only, as a new workspace is while its embeddings are pending."""
    kb = KnowledgeBase(tmp_path / "ws", None)
    kb.ingest_documents(
        text_document(name, text, tenant_id=ACME.tenant_id) for name, text in PEOPLE.items()
    )
    yield kb
    kb.close()


@pytest.mark.parametrize(
    ("question", "source"),
    [
        ("尚恩是谁？", "尚恩.md"),  # (found nothing before: 尚恩是)
        ("尚恩有多高？", "尚恩.md"),  # (nothing: 尚恩有, 多高)
        ("尚恩有什么爱好？", "尚恩.md"),
        ("白岳峰现效力于哪支球队？", "白岳峰.md"),
        ("苏博为什么改名成苏镜宇？", "苏镜宇.md"),
    ],
)
def test_a_short_question_about_a_name_finds_its_passage(
    people: KnowledgeBase, question: str, source: str
) -> None:
    found = people.search_result(question, k=3, user=ACME, mode="keyword")
    assert [h.chunk.doc_id for h in found.hits] == [source]
