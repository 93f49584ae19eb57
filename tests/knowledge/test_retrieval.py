"""Hybrid retrieval: fusion, fallbacks, dedup, filters, spaces per language (the store-backed
tests run on both stores: ``open_stack``)."""

from __future__ import annotations

import contextvars
import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from shelfhand.core.breaker import CircuitBreaker
from shelfhand.core.context import UserContext
from shelfhand.core.errors import KnowledgeError
from shelfhand.core.messages import Citation
from shelfhand.knowledge.analysis import tokenize_query
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.evidence.citations import to_citations
from shelfhand.knowledge.retrieval.fusion import candidate_relevance, rrf
from shelfhand.knowledge.retrieval.sides import Overlap
from shelfhand.knowledge.stack import EmbeddedKnowledge, open_embedded_store
from shelfhand.knowledge.types import Document, Scope, Section
from support.embedders import BagEmbedder

OpenStack = Callable[..., EmbeddedKnowledge]  # the open_stack fixture (conftest.py)


def doc(
    doc_id: str, text: str, *, doc_type: str = "markdown", tags: tuple[str, ...] = ()
) -> Document:
    return Document(
        doc_id=doc_id,
        source=doc_id,
        title="",
        doc_type=doc_type,
        sections=(Section(text=text),),
        content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        permission_tags=tags,
    )


CORPUS = [
    doc("warranty.md", "The projector warranty lasts twelve months from purchase."),
    doc("returns.md", "Unopened items may be returned within seven days."),
    doc("errors.md", "Error E-203 means the lamp is overheating; clean the filter."),
    doc("copy.md", "The projector warranty lasts twelve months from purchase."),
    doc("manual.pdf", "Lamp replacement steps for the projector.", doc_type="pdf"),
    doc("保修.md", "投影仪保修期为12个月，人为损坏不在保修范围内。"),
    doc("secret.md", "Dealer margin on the projector is forty percent.", tags=("sales",)),
]


@pytest.fixture
def kb(open_stack: OpenStack) -> EmbeddedKnowledge:
    embedder = BagEmbedder()
    kb = open_stack(EmbeddingRouter({"default": embedder}))
    kb.ingestor.ingest_documents(CORPUS)
    yield kb
    kb.close()


def sources(hits: Sequence[object]) -> list[str]:
    return [h.chunk.source for h in hits]  # type: ignore[attr-defined]


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = rrf([[1, 2, 3], [3, 1]], k=60)
    assert [key for key, _ in fused] == [1, 3, 2]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)


def test_hybrid_hits_carry_both_ranks(kb: EmbeddedKnowledge) -> None:
    hits = kb.retriever.search("projector warranty", k=3)
    assert hits[0].chunk.source in {"warranty.md", "copy.md"}
    assert hits[0].keyword_rank is not None and hits[0].vector_rank is not None


def test_identical_passages_are_returned_once(kb: EmbeddedKnowledge) -> None:
    hits = kb.retriever.search("projector warranty twelve months", k=5)
    assert len({h.chunk.content_hash for h in hits}) == len(hits)
    assert len({"warranty.md", "copy.md"} & set(sources(hits))) == 1


def test_when_keywords_find_nothing_the_vector_side_is_used(kb: EmbeddedKnowledge) -> None:
    # Only stopwords: the keyword side is empty, vectors still answer with their own scores.
    hits = kb.retriever.search("the of and", k=2)
    assert len(hits) == 2
    assert all(h.keyword_rank is None and h.vector_rank is not None for h in hits)


class CalibratedBag(BagEmbedder):
    calibrated = True  # (as the built-in models declare)


def test_hits_carry_their_cosine_to_the_query(open_stack: OpenStack) -> None:
    """Each hybrid hit's ``cosine`` (its meaning's nearness, whatever words it shares) is the
    cosine side of its relevance: equal to it for a hit the vectors alone found, and carried
    into its citation. A keyword search has none."""
    kb = open_stack(EmbeddingRouter({"default": CalibratedBag()}))
    kb.ingestor.ingest_documents(CORPUS)
    for hit in kb.retriever.search("projector warranty", k=3):
        assert hit.cosine is not None and -1.0 <= hit.cosine <= 1.0
        assert hit.relevance is not None and hit.relevance >= min(1.0, max(0.0, hit.cosine))
    only_vectors = kb.retriever.search("the of and", k=2)
    assert all(h.keyword_rank is None for h in only_vectors)
    for hit in only_vectors:
        assert hit.cosine is not None
        assert hit.relevance == pytest.approx(min(1.0, max(0.0, hit.cosine)))
    cited = to_citations(only_vectors)
    assert [c.cosine for c in cited] == [h.cosine for h in only_vectors]
    assert Citation.from_dict(cited[0].to_dict()) == cited[0]
    assert all(h.cosine is None for h in kb.retriever.search("E-203", mode="keyword", k=1))


def test_an_embedder_on_another_cosine_scale_gives_hits_no_cosine(kb: EmbeddedKnowledge) -> None:
    """The extractive answer's nearness rule was measured on the built-in models' cosines;
    an embedder that does not declare itself ``calibrated`` (the hashing one, a remote
    endpoint) leaves ``cosine`` unset, and the rule off."""
    hits = kb.retriever.search("the of and", k=2)
    assert hits and all(h.vector_rank is not None and h.cosine is None for h in hits)


class BlockingEmbedder(BagEmbedder):
    """Holds each query embedding until told to go on, recording the thread it ran in."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def embed_query(self, text: str) -> np.ndarray:
        assert self.go.wait(10)
        return super().embed_query(text)


def test_the_keyword_side_runs_while_the_query_is_embedded(open_stack: OpenStack) -> None:
    embedder = BlockingEmbedder()
    kb = open_stack(EmbeddingRouter({"default": embedder}))
    kb.ingestor.ingest_documents(CORPUS)
    kb.retriever._overlap = Overlap(1)  # one worker whatever the machine's CPU count
    searched = threading.Event()
    keyword = kb.retriever.keyword_index
    plain_search = keyword.search

    def search(*args: object, **kwargs: object) -> list[tuple[int, float]]:
        found = plain_search(*args, **kwargs)  # type: ignore[arg-type]
        searched.set()
        return found

    keyword.search = search  # type: ignore[method-assign]
    try:
        result: list[list[str]] = []
        t = threading.Thread(
            target=lambda: result.append(sources(kb.retriever.search("保修 warranty", k=3)))
        )
        t.start()
        # the keyword side finishes although the embedding has not started to return
        assert searched.wait(10)
        embedder.go.set()
        t.join(10)
        serial = kb.retriever
        serial._overlap = Overlap(0)  # no workers: the same search, in one thread
        assert result == [sources(serial.search("保修 warranty", k=3))]
        assert "保修.md" in result[0]
    finally:
        embedder.go.set()
        kb.close()


def test_a_busy_overlap_runs_the_work_in_the_calling_thread() -> None:
    overlap = Overlap(1)
    release = threading.Event()
    first = overlap.submit(lambda: release.wait(10))
    assert first is not None
    assert overlap.submit(lambda: None) is None  # every worker busy: the caller does it
    release.set()
    first.result(10)
    deadline = time.monotonic() + 10
    while (second := overlap.submit(lambda: 1)) is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the slot comes back once the first one's callback ran
    assert second is not None and second.result(10) == 1
    overlap.close()
    assert overlap.submit(lambda: 1) is None
    with pytest.raises(KnowledgeError):
        Overlap(-1)


def test_an_overlap_runs_the_work_in_the_callers_context() -> None:
    # the keyword side belongs to the caller's search (search_start), span and counts
    seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="outside")
    overlap = Overlap(1)
    token = seen.set("alice's search")
    try:
        future = overlap.submit(seen.get)
        assert future is not None and future.result(10) == "alice's search"

        def change() -> str:
            seen.set("changed")
            return seen.get()

        # a copy: what the work sets stays on its side
        changed = overlap.submit(change)
        assert changed is not None and changed.result(10) == "changed"
        assert seen.get() == "alice's search"
    finally:
        seen.reset(token)
        overlap.close()


def test_keyword_mode_uses_no_embedder(kb: EmbeddedKnowledge) -> None:
    embedder = kb.retriever.router.embedder("default")  # type: ignore[union-attr]
    before = embedder.query_calls  # type: ignore[attr-defined]
    hits = kb.retriever.search("E-203", mode="keyword", k=1)
    assert sources(hits) == ["errors.md"]
    assert embedder.query_calls == before  # type: ignore[attr-defined]


def test_a_failing_query_embedder_falls_back_to_keywords(
    kb: EmbeddedKnowledge, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = kb.retriever.router.embedder("default")  # type: ignore[union-attr]
    embedder.fail = True  # type: ignore[attr-defined]
    for mode in ("hybrid", "vector"):
        result = kb.retriever.search_result("保修期", k=3, mode=mode)  # type: ignore[arg-type]
        assert sources(result.hits) == ["保修.md"]
    assert "quota exceeded" in (result.degraded_reason or "")
    assert sum("quota exceeded" in r.message for r in caplog.records) == 1
    embedder.fail = False  # type: ignore[attr-defined]
    result = kb.retriever.search_result("保修期", k=3)
    assert result.degraded_reason is None


def test_filters_narrow_both_sides(kb: EmbeddedKnowledge) -> None:
    for mode in ("hybrid", "keyword", "vector"):
        hits = kb.retriever.search("projector lamp", k=5, mode=mode, filters={"doc_type": "pdf"})  # type: ignore[arg-type]
        assert sources(hits) == ["manual.pdf"]
        hits = kb.retriever.search(
            "projector",
            k=5,
            mode=mode,
            filters={"source": ["returns.md", "errors.md"]},  # type: ignore[arg-type]
        )
        assert set(sources(hits)) <= {"returns.md", "errors.md"}


def test_unknown_filters_are_refused(kb: EmbeddedKnowledge) -> None:
    with pytest.raises(KnowledgeError, match="unknown filter"):
        kb.retriever.search("x", filters={"author": "me"})


def test_tagged_chunks_need_the_role(kb: EmbeddedKnowledge) -> None:
    anonymous = kb.retriever.search("dealer margin", k=7)
    assert "secret.md" not in sources(anonymous)
    sales = UserContext(tenant_id="default", user_id="u", roles=["sales"])
    assert sources(kb.retriever.search("dealer margin", k=1, user=sales)) == ["secret.md"]
    stranger = UserContext(tenant_id="acme", user_id="u", roles=["admin"])
    assert kb.retriever.search("projector", user=stranger) == []


def test_every_space_is_searched_with_its_own_embedder(open_stack: OpenStack) -> None:
    en, zh = BagEmbedder("en-model"), BagEmbedder("zh-model", dim=48)
    kb = open_stack(EmbeddingRouter({"en": en, "zh": zh}))
    kb.ingestor.ingest_documents([CORPUS[0], CORPUS[5]])
    assert sorted(kb.vectors.spaces()) == ["en", "zh"]
    result = kb.retriever.search_result("保修期多久", k=2, mode="vector")
    assert sources(result.hits)[0] == "保修.md"
    assert (en.query_calls, zh.query_calls) == (1, 1)
    timings = result.timings
    assert timings.total_ms >= timings.vector_ms > 0
    kb.close()


def test_a_hits_cosine_comes_from_the_calibrated_spaces_only(open_stack: OpenStack) -> None:
    """With one built-in-like model and one on another scale, a hit's ``cosine`` is that of
    the calibrated space; a hit only the other space scored has none."""
    en, zh = CalibratedBag("en-model"), BagEmbedder("zh-model", dim=48)
    kb = open_stack(EmbeddingRouter({"en": en, "zh": zh}))
    kb.ingestor.ingest_documents([CORPUS[0], CORPUS[5]])
    hits = {h.chunk.source: h for h in kb.retriever.search("保修期多久", k=2, mode="vector")}
    assert hits["保修.md"].cosine is None  # the zh space's
    english = [h for source, h in hits.items() if source != "保修.md"]
    assert english and all(h.cosine is not None for h in english)
    kb.close()


class HangingEmbedder(BagEmbedder):
    """Answers normally until ``hang`` is set, then blocks until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.release = threading.Event()

    def embed_query(self, text: str) -> np.ndarray:
        self.query_calls += 1
        if self.hang:
            self.release.wait(30)
        return self.embed([text])[0]


@pytest.fixture
def hanging(tmp_path: Path) -> Iterator[tuple[EmbeddedKnowledge, HangingEmbedder]]:
    embedder = HangingEmbedder()
    kb = open_embedded_store(tmp_path, EmbeddingRouter({"default": embedder}), embed_timeout=0.05)
    kb.ingestor.ingest_documents(CORPUS)
    assert kb.retriever.warm_up() is None  # the deadline applies from now on
    yield kb, embedder
    embedder.release.set()
    kb.close()


def test_a_hanging_query_embedder_falls_back_to_keywords_with_the_reason(
    hanging: tuple[EmbeddedKnowledge, HangingEmbedder],
) -> None:
    kb, embedder = hanging
    embedder.hang = True
    result = kb.retriever.search_result("保修期", k=3)
    hits = result.hits
    assert sources(hits) == ["保修.md"]
    assert all(h.vector_rank is None for h in hits)
    assert "did not finish within 0.05s" in (result.degraded_reason or "")


def test_the_embedding_breaker_pauses_a_failing_embedder_then_tries_again(
    hanging: tuple[EmbeddedKnowledge, HangingEmbedder],
) -> None:
    kb, embedder = hanging
    kb.retriever.breaker = CircuitBreaker("query embedding", trip_after=3, reset_after=0.2)
    embedder.hang = True
    for _ in range(3):  # three late answers in a row open the breaker
        kb.retriever.search("warranty", k=2)
    asked = embedder.query_calls
    result = kb.retriever.search_result("warranty", k=2)
    assert embedder.query_calls == asked  # not asked while paused
    assert sources(result.hits) and "paused after 3 failures" in (result.degraded_reason or "")
    embedder.hang = False
    embedder.release.set()
    deadline = time.monotonic() + 10
    while result.degraded_reason is not None and time.monotonic() < deadline:
        time.sleep(0.05)
        result = kb.retriever.search_result("projector warranty", k=2)
    assert result.degraded_reason is None  # the cooldown ended: vectors again
    assert any(h.vector_rank is not None for h in result.hits)


def test_the_first_query_of_a_space_may_take_the_load_timeout(tmp_path: Path) -> None:
    embedder = HangingEmbedder()
    kb = open_embedded_store(tmp_path, EmbeddingRouter({"default": embedder}), embed_timeout=0.01)
    kb.ingestor.ingest_documents(CORPUS)
    embedder.hang = True
    timer = threading.Timer(0.1, embedder.release.set)  # "loading" outlasts embed_timeout
    timer.start()
    result = kb.retriever.search_result("projector warranty", k=2)
    timer.join()
    assert result.degraded_reason is None
    assert any(h.vector_rank is not None for h in result.hits)
    kb.close()


def test_a_term_in_most_chunks_does_not_rank_while_rarer_ones_find_k(
    open_stack: OpenStack,
) -> None:
    """ "projector" is in every chunk: "projector lamp" ranks by "lamp" alone (same hits, same
    scores) while "lamp" finds k readable chunks, and by both terms once it does not."""
    kb = open_stack(None)
    notes = [
        doc(
            f"p{i}.md",
            f"Projector note {i}." + (" Lamp replacement." if i < 3 else ""),
            tags=("hr",) if i in (1, 2) else (),
        )
        for i in range(30)
    ]
    kb.ingestor.ingest_documents(notes)
    index = kb.keyword
    admin = Scope(tenant_id="default", roles=["admin"])
    both, lamp = tokenize_query("projector lamp"), tokenize_query("lamp")
    lamp_hits = index.search(lamp, 3, scope=admin)
    assert index.search(both, 3, scope=admin) == lamp_hits
    # asked for more than "lamp" finds: every term ranks, the lamp chunks first
    ten = index.search(both, 10, scope=admin)
    assert len(ten) == 10
    assert {r for r, _ in ten[:3]} == {r for r, _ in lamp_hits}
    # a caller who may read one lamp chunk: the common term ranks the rest for them too
    public = Scope(tenant_id="default", roles=[])
    readable_lamp = index.search(lamp, 3, scope=public)
    anonymous = index.search(both, 3, scope=public)
    assert len(readable_lamp) == 1 and len(anonymous) == 3
    assert anonymous[0][0] == readable_lamp[0][0]
    # off: the common term adds to every score
    index.common_share = 1.0
    with_common = index.search(both, 3, scope=admin)
    assert {r for r, _ in with_common} == {r for r, _ in lamp_hits}
    assert min(s for _, s in with_common) > max(s for _, s in lamp_hits)
    kb.close()


def test_the_keyword_search_hands_its_term_statistics_to_the_relevance_estimate(
    kb: EmbeddedKnowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = tokenize_query("projector lamp 保修 nonexistentword")
    hits = kb.keyword.search(tokens, 5, scope=Scope())
    assert hits and hits.stats() == kb.keyword.doc_freqs(tokens)  # type: ignore[attr-defined]
    # the estimate from the search's statistics equals the one that asks the index
    asked = candidate_relevance(tokens, list(hits), [], [], kb.keyword)
    assert candidate_relevance(tokens, hits, [], [], kb.keyword) == asked
    # and a search does not ask again
    monkeypatch.setattr(kb.keyword, "doc_freqs", lambda _: pytest.fail("statistics read twice"))
    found = kb.retriever.search("projector lamp 保修 nonexistentword", k=3, mode="keyword")
    assert {h.relevance for h in found} <= set(asked.values())
