"""Context compression keeps the sentences that answer the query, with offsets that stay right."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shelfhand.core.errors import ConfigurationError
from shelfhand.core.messages import Citation
from shelfhand.core.settings import Settings
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.knowledge.evidence.citations import prepare_evidence, to_citations
from shelfhand.knowledge.evidence.compress import GAP, compress_citation, keep_spans, sentence_spans
from shelfhand.knowledge.ingest.chunking import count_tokens
from shelfhand.knowledge.reading.readers import read_file

ZH = (
    "本政策适用于明光官方商城售出的投影仪及配件。申请退货时请提供订单号，退货商品需附带原包装、配件和赠品。\n\n"
    "未拆封、包装完好的商品，自签收之日起 30 天内可申请无理由退货，全额退款，我们承担退货运费。\n\n"
    "仓库收到退货并验货通过后，退款在 3 至 5 个工作日内原路退回。\n\n"
    "定制刻字商品、已激活的延保服务卡，以及因人为损坏导致的问题不支持退货！"
)
EN = (
    "Unopened items can be returned within 30 days of delivery for a full refund. Opened items "
    "can be returned within 7 days: defective items get a full refund; for non-defective "
    "returns a 10% restocking fee applies and the buyer pays return shipping. Between day 8 "
    "and day 15, defective items can be exchanged for the same model. Refunds are issued within "
    "3.5 business days after inspection. Please include your order ID."
)


def pieces(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[s:e] for s, e in spans]


def test_sentences_split_on_chinese_and_english_ends_and_stay_exact_substrings() -> None:
    zh = pieces(ZH, sentence_spans(ZH))
    assert zh[0] == "本政策适用于明光官方商城售出的投影仪及配件。"
    assert zh[-1] == "定制刻字商品、已激活的延保服务卡，以及因人为损坏导致的问题不支持退货！"
    assert "申请退货时请提供订单号，退货商品需附带原包装、配件和赠品。" in zh
    en = pieces(EN, sentence_spans(EN))
    # "3.5" is not a sentence end; ";" is
    assert "Refunds are issued within 3.5 business days after inspection." in en
    assert (
        "for non-defective returns a 10% restocking fee applies and the buyer pays return shipping."
        in en
    )
    mixed = "E-203 灯泡过热。Wait 30 minutes; then restart\n再试一次"
    assert pieces(mixed, sentence_spans(mixed)) == [
        "E-203 灯泡过热。",
        "Wait 30 minutes;",
        "then restart",
        "再试一次",
    ]


def test_a_passage_within_the_budget_is_left_whole() -> None:
    c = Citation(index=1, source="r.md", text=EN, start=10, end=10 + len(EN))
    assert compress_citation(c, "refund", tokens=count_tokens(EN)) is c
    # without its place in the document there are no offsets to give: left whole
    unplaced = Citation(index=1, source="web", text=EN)
    assert compress_citation(unplaced, "restocking fee", tokens=20) is unplaced
    assert compress_citation(c, "restocking fee", tokens=20).spans
    with pytest.raises(ValueError, match="at least 1 token"):
        keep_spans(EN, "refund", tokens=0)


def test_chinese_compression_keeps_the_hit_and_its_neighbours_and_marks_the_gaps() -> None:
    kept = pieces(ZH, keep_spans(ZH, "退款几个工作日到账", tokens=60))
    joined = "".join(kept)
    assert "退款在 3 至 5 个工作日内原路退回。" in joined
    assert sum(count_tokens(p) for p in kept) <= 60
    c = compress_citation(
        Citation(index=1, source="r.md", text=ZH, start=0), "退款几个工作日到账", tokens=60
    )
    assert GAP in c.text and len(c.text) < len(ZH)
    assert "退款在 3 至 5 个工作日内原路退回。" in c.text
    assert "定制刻字商品" not in c.text or "本政策适用于" not in c.text


def test_english_compression_keeps_the_sentence_that_answers() -> None:
    c = compress_citation(
        Citation(index=1, source="r.md", text=EN, start=0), "restocking fee", tokens=30
    )
    assert "a 10% restocking fee applies" in c.text
    assert "Please include your order ID." not in c.text
    assert c.text.startswith(GAP) and c.text.endswith(GAP)


def test_a_single_sentence_over_the_budget_keeps_its_head() -> None:
    text = "word " * 200 + "end."
    (span,) = keep_spans(text, "word", tokens=20)
    assert span[0] == 0 and count_tokens(text[slice(*span)]) <= 20


def test_pinned_values_keep_their_sentence_even_when_the_query_misses_it() -> None:
    text = (
        "整机保修期为自购买之日起 12 个月。"
        + "本政策适用于 Lumen 系列投影仪。" * 3
        + "光源保修 6 个月。" * 3
    )
    plain = pieces(text, keep_spans(text, "光源", tokens=25))
    assert not any("12 个月" in p for p in plain)
    pinned = pieces(text, keep_spans(text, "光源", tokens=25, pinned=["12 个月"]))
    assert any("12 个月" in p for p in pinned)


# --- offsets into the real documents ---------------------------------------------------------


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    kb = KnowledgeBase(tmp_path_factory.mktemp("compress") / "ws", None)
    kb.ingest([sample_corpus()])
    yield kb
    kb.close()


def _document_texts() -> dict[str, str]:
    texts = {}
    for path in sorted(sample_corpus().iterdir()):
        for doc in read_file(path, source=f"projector/{path.name}"):
            texts[doc.doc_id] = doc.text
    return texts


@pytest.mark.parametrize(
    "query",
    ["退款多久到账？", "整机保修期", "E-203 灯泡过热怎么办", "restocking fee", "HDMI no signal"],
)
def test_every_kept_piece_is_the_document_text_at_its_offsets(
    samples: KnowledgeBase, query: str
) -> None:
    documents = _document_texts()
    hits = samples.search(query, k=5, mode="keyword")
    assert hits
    full = to_citations(hits)
    compressed = prepare_evidence(full, query, compress_tokens=24)
    assert any(c.spans for c in compressed)  # something was long enough to compress
    for before, after in zip(full, compressed, strict=True):
        doc_text = documents[after.doc_id]
        assert before.start is not None and before.end is not None
        assert doc_text[before.start : before.end] == before.text
        if not after.spans:
            assert after.text == before.text
            continue
        kept = [doc_text[s:e] for s, e in after.spans]
        # the citation text is exactly the pieces, "…" where something was left out
        parts = [GAP] if doc_text[before.start : after.spans[0][0]].strip() else []
        for n, piece in enumerate(kept):
            parts += [GAP, piece] if n else [piece]
        if doc_text[after.spans[-1][1] : before.end].strip():
            parts.append(GAP)
        assert after.text == " ".join(parts)
        for (s, e), piece in zip(after.spans, kept, strict=True):
            assert before.start <= s < e <= before.end
            assert piece and piece in before.text
        assert all(s2 > e1 for (_, e1), (s2, _) in zip(after.spans, after.spans[1:], strict=False))


def test_compression_is_off_by_default_and_its_settings_are_checked(tmp_path: Path) -> None:
    settings = Settings.load(tmp_path, env={})
    assert settings.compress is False and settings.compress_tokens == 200
    on = Settings.load(tmp_path, env={"SHELFHAND_COMPRESS": "1", "SHELFHAND_COMPRESS_TOKENS": "80"})
    assert on.compress is True and on.compress_tokens == 80
    (tmp_path / "shelfhand.toml").write_text(
        "[shelfhand]\ncompress = true\ncompress_tokens = 120\n", encoding="utf-8"
    )
    assert Settings.load(tmp_path, env={}).compress_tokens == 120
    with pytest.raises(ConfigurationError, match="compress_tokens"):
        Settings.load(tmp_path, env={"SHELFHAND_COMPRESS_TOKENS": "5"})
    with pytest.raises(ConfigurationError, match="compress"):
        Settings.load(tmp_path, env={"SHELFHAND_COMPRESS": "maybe"})
