"""A Chinese word jieba's dictionary lacks (team jargon: 大促, 发版, 封网) is guessed by the
search-mode cut's HMM, and guessed differently in different sentences: the release policy's
"日为大促封网期" was indexed 日为/大/促封/网期 and the question's "大促期间" searched 大促/期间,
so "大促期间能发版吗？" found nothing. The index now also holds the character pairs of each
stretch the dictionary cuts into single characters (大促, 促封, 封网, 网期), cut the same way
whatever the context, and a query searches those of its own pairs the index holds."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from shelfhand import UserContext
from shelfhand.knowledge import KnowledgeBase, sample_corpus
from shelfhand.knowledge.analysis import (
    query_words,
    split_words,
    tokenize_for_index,
    tokenize_for_matching,
    tokenize_query,
    unknown_pairs,
)
from support.knowledge import sample_kb, text_document

ACME = UserContext(tenant_id="acme", user_id="alice")
GLOBEX = UserContext(tenant_id="globex", user_id="bob")
RELEASE = (
    "常规发布窗口为周二和周四的 14:00 至 17:00。周五和节假日期间禁止发布。"
    "每年 11 月 1 日至 11 月 15 日为大促封网期，只允许发布 P0 修复。"
)
ONCALL = "生产系统实行 7×24 小时值班，主值班须在 15 分钟内响应告警。"


def test_the_index_holds_the_pairs_of_a_word_the_dictionary_lacks() -> None:
    indexed = tokenize_for_index("每年 11 月 1 日至 11 月 15 日为大促封网期，只允许发布 P0 修复。")
    assert {"大促", "封网"} <= set(indexed)
    # a pair the cut already gave is not counted twice; words jieba knows give no pairs
    assert tokenize_for_index("日为大促封网期").count("网期") == 1
    assert tokenize_for_index("发布窗口是什么时候？") == tokenize_for_matching(
        "发布窗口是什么时候？"
    )
    # the answer check's comparison and the query's own tokens are left as they were
    assert "大促" not in tokenize_for_matching("日为大促封网期")
    assert "能发" not in tokenize_query("大促期间能发版吗？")
    assert unknown_pairs("大促期间能发版吗？") == ["大促", "能发", "发版"]
    # the search reads both from one analysis: its tokens, and the pairs that are not tokens
    assert query_words("大促期间能发版吗？") == (tokenize_query("大促期间能发版吗？"), ["能发"])
    assert unknown_pairs("发布窗口是什么时候？ How long?") == []


def test_the_pairs_come_after_the_words_so_split_words_still_reads_the_runs() -> None:
    tokens = tokenize_for_index("公司的年假政策是什么？")
    assert tokens[-1] == "年假"
    assert split_words(tokens, "公司的年假政策是什么？") == ("年假",)


def test_a_hostile_run_gives_no_pairs_and_stays_cheap() -> None:
    run = "䲟" * 30_000
    assert tokenize_for_index(run).count("䲟䲟") == 0
    assert unknown_pairs(run) == []


def _ids(kb: KnowledgeBase, query: str, user: UserContext, mode: str) -> list[str]:
    options = replace(kb.search_options, min_relevance=0.25)  # the app's floor
    found = kb.search_result(query, k=5, user=user, mode=mode, options=options)  # type: ignore[arg-type]
    return [h.chunk.doc_id for h in found.hits]


@pytest.mark.parametrize(
    ("vectors", "mode"),
    [(False, "keyword"), (True, "keyword"), (True, "hybrid")],
    ids=["keyword-only", "keyword", "hybrid"],
)
def test_jargon_finds_the_policy_for_its_tenant_only_with_two_callers_at_once(
    tmp_path: Path, vectors: bool, mode: str
) -> None:
    with sample_kb(tmp_path, vectors=vectors) as kb:
        kb.ingest([sample_corpus()], tenant_id="globex")
        kb.ingest_documents(
            [
                text_document("ops/release.md", RELEASE, title="发布规范", tenant_id="acme"),
                text_document("ops/oncall.md", ONCALL, title="值班规范", tenant_id="acme"),
            ]
        )
        questions = ["大促期间能发版吗？", "封网期是哪几天？"]
        with ThreadPoolExecutor(4) as pool:
            runs = [
                pool.submit(_ids, kb, q, user, mode)
                for _ in range(5)
                for q in questions
                for user in (ACME, GLOBEX)
            ]
            found = [run.result() for run in runs]
        for acme, globex in zip(found[0::2], found[1::2], strict=True):
            assert acme[:1] == ["ops/release.md"]
            assert not any(d.startswith("ops/") for d in globex)


def test_one_reading_of_the_dictionary_gives_jieba_s_own_cuts() -> None:
    """The index's cut and its pairs come from one walk of jieba's route (it read the
    dictionary twice before): the same words as ``cut_for_search`` and the same pairs as
    its dictionary-only cut, over the samples' Chinese and a few odd runs."""
    import jieba

    from shelfhand.knowledge.analysis import _index_cut, _pairs_of

    def _unknown_pairs(run: str) -> list[str]:  # (from jieba's own dictionary-only cut)
        return _pairs_of(jieba.lcut(run, HMM=False))

    texts = [p.read_text(encoding="utf-8") for p in sorted(sample_corpus().rglob("*.md"))]
    texts += [RELEASE, ONCALL, "㐀㐁中文㐂测试", "䲟又叫做什么", "日为大促封网期", "的的的的"]
    runs = [r for t in texts for r in re.findall(r"[\u3400-\u9fff]{2,500}", t)]
    assert len(runs) > 100
    for run in runs:
        words, pairs = _index_cut(run)
        assert list(words) == list(jieba.cut_for_search(run, HMM=True)), run
        assert pairs == _unknown_pairs(run), run
