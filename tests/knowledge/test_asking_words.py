"""Words that ask (为什么, 哪一年, 什么时候, 多久) name nothing a passage holds: a passage
answers "莱索托哪一年独立？" with "1966 年", never with 哪一年. A query searched them (and 一年,
found inside 哪一年), and they counted against every hit's relevance; in a workspace of one
document, where the words a passage holds weigh little beside those it lacks, the question
found nothing. Queries no longer search them; the index is unchanged."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from shelfhand import UserContext
from shelfhand.knowledge import KnowledgeBase
from shelfhand.knowledge.analysis import tokenize_for_index, tokenize_query
from support.knowledge import text_document

ACME = UserContext(tenant_id="acme", user_id="alice")
GLOBEX = UserContext(tenant_id="globex", user_id="bob")
LESOTHO = "莱索托王国是非洲南部的内陆国家，四面被南非包围。1966 年 10 月 4 日，莱索托脱离英国独立。"


def test_a_query_does_not_search_the_words_that_ask() -> None:
    assert tokenize_query("莱索托哪一年独立？") == ["莱索托", "独立"]
    assert tokenize_query("赫姓可以追溯到什么时候？")[-1] != "什么时候"
    assert "保修期" in tokenize_query("保修期多久？") and "多久" not in tokenize_query(
        "保修期多久？"
    )
    # a passage's words are indexed as before, and so is 一年 of a question that does not ask
    assert "一年" in tokenize_for_index("哪一年都行，保修一年。")
    assert "一年" in tokenize_query("保修一年吗？")


def test_a_one_document_workspace_answers_its_question_for_its_tenant(tmp_path: Path) -> None:
    with KnowledgeBase(tmp_path / "ws", None) as kb:  # keyword only, as right after an upload
        kb.ingest_documents(
            [text_document("wiki/lesotho.md", LESOTHO, title="莱索托", tenant_id="acme")]
        )

        options = replace(kb.search_options, min_relevance=0.25)  # the app's floor

        def found(question: str, user: UserContext) -> list[str]:
            found = kb.search_result(question, k=5, user=user, mode="keyword", options=options)
            return [h.chunk.doc_id for h in found.hits]

        questions = ["莱索托哪一年独立？", "莱索托是什么时候独立的？", "埃及的首都在哪里？"]
        with ThreadPoolExecutor(4) as pool:
            runs = {
                (q, user.tenant_id): pool.submit(found, q, user)
                for q in questions
                for user in (ACME, GLOBEX)
            }
        assert runs[("莱索托哪一年独立？", "acme")].result() == ["wiki/lesotho.md"]
        assert runs[("莱索托是什么时候独立的？", "acme")].result() == ["wiki/lesotho.md"]
        # what the passage does not hold is still not found, and globex reads nothing of acme's
        assert runs[("埃及的首都在哪里？", "acme")].result() == []
        assert all(runs[(q, "globex")].result() == [] for q in questions)
