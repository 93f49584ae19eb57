"""Chunking: structure first, token budget, overlap, exact offsets, Chinese sentences."""

from __future__ import annotations

import hashlib
import itertools
import random
from importlib.resources import files
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shelfhand.knowledge.ingest.chunking import chunk_document, count_tokens
from shelfhand.knowledge.reading.readers import iter_files, read_file
from shelfhand.knowledge.types import Chunk, Document, Section

SAMPLES = Path(str(files("shelfhand") / "samples" / "projector"))


def make_doc(
    *sections: tuple[str, tuple[str, ...], int | None], doc_id: str = "doc.md"
) -> Document:
    """A document whose section starts follow ``Document.text`` (joined by blank lines)."""
    built = []
    start = 0
    for text, path, page in sections:
        built.append(Section(text=text, section_path=path, page=page, start=start))
        start += len(text) + 2
    return Document(
        doc_id=doc_id,
        source=doc_id,
        title="Manual",
        doc_type="markdown",
        sections=tuple(built),
        content_hash="h",
        permission_tags=("support",),
        tenant_id="acme",
        updated_at=123.0,
    )


def assert_well_formed(doc: Document, chunks: list[Chunk], max_tokens: int) -> None:
    for index, chunk in enumerate(chunks):
        assert chunk.chunk_index == index
        assert chunk.chunk_id == f"{doc.doc_id}::{index}"
        assert doc.text[chunk.start : chunk.end] == chunk.text
        assert chunk.text == chunk.text.strip() and chunk.text
        assert count_tokens(chunk.text) <= max_tokens
        assert chunk.content_hash == hashlib.sha256(chunk.text.encode("utf-8")).hexdigest()


# --- token counting --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("   \n", 0),
        ("lamp", 1),
        ("projector", 3),  # 9 letters -> ceil(9 / 4)
        ("E-203", 3),  # "E", "-", "203"
        ("Hello, world!", 6),
        ("投影仪", 3),
        ("灯泡过热。", 5),
        ("E-203 灯泡过热", 7),
        ("snake_case", 4),  # "snake" 2, "_" 1, "case" 1
    ],
)
def test_count_tokens_approximates_bpe(text: str, tokens: int) -> None:
    assert count_tokens(text) == tokens


# --- structure -------------------------------------------------------------------------------


def test_a_short_section_is_one_chunk_with_the_document_metadata() -> None:
    doc = make_doc(("整机保修 24 个月。", ("保修政策", "保修期限"), None))
    [chunk] = chunk_document(doc)
    assert chunk.text == "整机保修 24 个月。"
    assert (chunk.start, chunk.end) == (0, len(chunk.text))
    assert chunk.section_path == ("保修政策", "保修期限")
    assert chunk.section == "保修政策 > 保修期限"
    assert (chunk.title, chunk.source, chunk.doc_type) == ("Manual", "doc.md", "markdown")
    assert (chunk.permission_tags, chunk.tenant_id, chunk.updated_at) == (
        ("support",),
        "acme",
        123.0,
    )
    assert chunk.page is None


def test_chunks_never_cross_sections_or_pages() -> None:
    page = " ".join(f"Sentence {n} about the lamp." for n in range(30))
    doc = make_doc((page, (), 1), ("短页。", (), 2), (page, (), 3))
    chunks = chunk_document(doc, max_tokens=30, overlap_tokens=8)
    assert_well_formed(doc, chunks, 30)
    for chunk in chunks:
        section = next(s for s in doc.sections if s.page == chunk.page)
        assert section.start <= chunk.start and chunk.end <= section.start + len(section.text)
    assert [c.page for c in chunks if c.page == 2] == [2]
    assert next(c for c in chunks if c.page == 2).text == "短页。"


def test_chinese_text_is_split_into_sentences_on_chinese_punctuation() -> None:
    sentences = [
        "投影仪检测到灯泡温度过高时会自动熄灭灯泡。",
        "风扇会继续运转散热！",
        "现在可以拔掉电源吗？",
        "不可以；请等待三十分钟。",
        "然后清洁防尘网……",
        "如果再次出现 E-203，请联系售后。",
    ]
    doc = make_doc(("".join(sentences), (), None))
    chunks = chunk_document(doc, max_tokens=24, overlap_tokens=0)
    assert_well_formed(doc, chunks, 24)
    assert all(c.text[-1] in "。！？；…" for c in chunks)
    assert "".join(c.text for c in chunks) == "".join(sentences)
    starts = {0}
    for sentence in sentences:
        starts.add(doc.text.index(sentence))
    assert all(c.start in starts or doc.text[c.start - 1] in "；" for c in chunks)


def test_decimal_points_and_codes_do_not_end_sentences() -> None:
    text = "Lamp v2.5 lasts 3.5 years. E-203. Next sentence."  # 12 + 4 + 4 tokens
    doc = make_doc((text, (), None))
    chunks = chunk_document(doc, max_tokens=12, overlap_tokens=0)
    assert [c.text for c in chunks] == ["Lamp v2.5 lasts 3.5 years.", "E-203. Next sentence."]


def test_a_paragraph_that_fits_starts_a_fresh_chunk_once_the_current_one_is_half_full() -> None:
    first = "First paragraph sentence one. First paragraph sentence two."
    second = "Second paragraph has a fairly long sentence in it. And one more."
    doc = make_doc((f"{first}\n\n{second}", (), None))
    budget = count_tokens(first) + 5
    assert count_tokens(second) <= budget < count_tokens(first) + count_tokens(second)
    chunks = chunk_document(doc, max_tokens=budget, overlap_tokens=0)
    assert [c.text for c in chunks] == [first, second]


def test_consecutive_chunks_overlap_by_whole_trailing_sentences() -> None:
    sentences = [f"Step {n} checks part {n} of the cooling system." for n in range(12)]
    doc = make_doc((" ".join(sentences), (), None))
    chunks = chunk_document(doc, max_tokens=40, overlap_tokens=15)
    assert_well_formed(doc, chunks, 40)
    assert len(chunks) > 2
    runs = {" ".join(sentences[i:j]) for i in range(12) for j in range(i + 1, 13)}
    for previous, current in itertools.pairwise(chunks):
        assert current.start < previous.end  # overlap present
        shared = doc.text[current.start : previous.end]
        assert shared in runs
        assert count_tokens(shared) <= 15
        assert current.end > previous.end  # and progress made


def test_zero_overlap_gives_disjoint_chunks() -> None:
    doc = make_doc((" ".join(f"Sentence {n} is here." for n in range(40)), (), None))
    chunks = chunk_document(doc, max_tokens=20, overlap_tokens=0)
    assert all(b.start > a.end for a, b in itertools.pairwise(chunks))


def test_an_over_long_sentence_is_cut_within_the_budget() -> None:
    chinese = "灯" * 250
    blob = "x" * 1000  # an unbroken run of letters (say base64) is cut too
    doc = make_doc((chinese, (), None), (f"Prefix {blob} suffix", (), None))
    chunks = chunk_document(doc, max_tokens=100, overlap_tokens=10)
    assert_well_formed(doc, chunks, 100)
    assert "".join(c.text for c in chunks if c.start < len(chinese)) == chinese
    assert sum(c.text.count("x") for c in chunks) >= 1000


def test_chunking_is_deterministic() -> None:
    [doc] = read_file(SAMPLES / "troubleshooting-manual.pdf", source="manual.pdf")
    first = chunk_document(doc, max_tokens=60, overlap_tokens=10)
    again = chunk_document(doc, max_tokens=60, overlap_tokens=10)
    assert first == again
    assert first[0].chunk_id == "manual.pdf::0"
    assert len({c.chunk_id for c in first}) == len(first)


def test_every_sample_file_chunks_with_exact_offsets() -> None:
    for path in iter_files([SAMPLES]):
        for doc in read_file(path, source=path.name):
            for budget in (40, 400):
                chunks = chunk_document(doc, max_tokens=budget, overlap_tokens=budget // 10)
                assert chunks
                assert_well_formed(doc, chunks, budget)


@pytest.mark.parametrize(("max_tokens", "overlap"), [(0, 0), (10, 10), (10, -1)])
def test_invalid_budgets_are_rejected(max_tokens: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_document(make_doc(("text", (), None)), max_tokens=max_tokens, overlap_tokens=overlap)


# --- properties ------------------------------------------------------------------------------

_PIECES = st.sampled_from(
    ["lamp", "projector", "E-203", "3.5", "灯泡", "过热", "。", "！", "？", "；", ".", "!", ",",
     " ", " ", " ", "\n", "\n\n", "supercalifragilistic", "…", "（E-105）"]
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    sections=st.lists(st.lists(_PIECES, max_size=80).map("".join), min_size=1, max_size=4),
    max_tokens=st.integers(min_value=1, max_value=60),
    overlap_ratio=st.floats(min_value=0, max_value=0.9),
)
def test_chunks_stay_within_budget_point_at_their_text_and_cover_every_section(
    sections: list[str], max_tokens: int, overlap_ratio: float
) -> None:
    doc = make_doc(*((text.strip(), (f"s{i}",), i + 1) for i, text in enumerate(sections)))
    overlap = int(max_tokens * overlap_ratio)
    chunks = chunk_document(doc, max_tokens=max_tokens, overlap_tokens=overlap)
    assert_well_formed(doc, chunks, max_tokens)
    for section in doc.sections:
        covered = [False] * len(section.text)
        for chunk in chunks:
            if chunk.page == section.page:
                assert chunk.section_path == section.section_path
                for offset in range(chunk.start - section.start, chunk.end - section.start):
                    covered[offset] = True
        assert all(c or ch.isspace() for c, ch in zip(covered, section.text, strict=True))


# --- speed -----------------------------------------------------------------------------------


def test_chunking_thousands_of_abstracts() -> None:
    # speed lives in bench/ (docs/benchmarks/history.md), never in a timed unit test
    rng = random.Random(7)
    words = ["the", "of", "protein", "cell", "expression", "cancer", "patients", "increased"]

    def abstract() -> str:
        return " ".join(
            " ".join(rng.choice(words) for _ in range(rng.randint(12, 30))).capitalize() + "."
            for _ in range(rng.randint(8, 14))
        )

    docs = [make_doc((abstract(), (), None), doc_id=f"d{i}") for i in range(2000)]
    total = sum(len(chunk_document(doc)) for doc in docs)
    assert total >= 2000
