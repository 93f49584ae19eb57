"""Versions side by side: a hit from one version of a document brings the same section of its
other versions along, visible by the search's own rules (both stores: real SQLite + tantivy
workspaces and PostgreSQL)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from shelfhand import retrieve_tool
from shelfhand.agent.agent import Agent
from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.knowledge.retrieval.versions import version_key
from shelfhand.knowledge.types import Document, Section
from shelfhand.testing import FunctionModel, text
from shelfhand.tools.toolkit import Toolkit


def policy(version: int, months: int, *, tags: tuple[str, ...] = ()) -> Document:
    title = f"保修政策（第 {version} 版）"
    sections = (
        Section(text=f"{title}\n本版本适用于 Lumen 系列。", section_path=(title,)),
        Section(text=f"整机保修 {months} 个月。", section_path=(title, "保修期限")),
        Section(text="人为损坏不在保修范围内。", section_path=(title, "保修范围")),
    )
    body = "".join(s.text for s in sections)
    return Document(
        doc_id=f"policy-v{version}.md",
        source=f"policy-v{version}.md",
        title=title,
        doc_type="markdown",
        sections=sections,
        content_hash=hashlib.sha256(body.encode()).hexdigest(),
        permission_tags=tags,
    )


@pytest.fixture
def database_url(store_kind: str, request: pytest.FixtureRequest) -> str | None:
    """Both stores: ``None`` (embedded) or a fresh PostgreSQL database (conftest.py)."""
    return str(request.getfixturevalue("pg_url")) if store_kind.startswith("pg") else None


@pytest.fixture
def kb(tmp_path: Path, database_url: str | None, store_kind: str) -> Iterator[KnowledgeBase]:
    qdrant = str(tmp_path / "qdrant") if "qdrant" in store_kind else None
    base = KnowledgeBase(tmp_path / "ws", None, database_url=database_url, qdrant_url=qdrant)
    base.ingest_documents([policy(1, 12), policy(2, 24), policy(3, 36, tags=("legal",))])
    yield base
    base.close()


def test_version_markers_are_taken_off_titles_and_file_names() -> None:
    assert version_key("保修政策（第 2 版）") == version_key("保修政策（第 1 版）") == "保修政策"
    assert version_key("Returns policy v1.2") == version_key("Returns policy (version 3)")
    assert version_key("Returns policy", "docs/returns-v2.md") == "returns"
    assert version_key("Returns policy", "docs/returns.md") is None


def test_a_hit_brings_the_same_section_of_the_other_visible_versions(kb: KnowledgeBase) -> None:
    hits = kb.search("整机保修 12 个月", k=3, mode="keyword")
    ids = [h.chunk.chunk_id for h in hits]
    assert ids[:2] == ["policy-v1.md::1", "policy-v2.md::1"]
    # version 3 is tagged "legal": an ordinary caller never gets it as a sibling
    assert "policy-v3.md::1" not in ids
    legal = UserContext(tenant_id="default", user_id="l", roles=["legal"])
    ids = [h.chunk.chunk_id for h in kb.search("整机保修 12 个月", k=3, mode="keyword", user=legal)]
    assert {"policy-v1.md::1", "policy-v2.md::1", "policy-v3.md::1"} <= set(ids)


def test_siblings_stay_within_k_and_identical_passages_are_not_repeated(
    kb: KnowledgeBase,
) -> None:
    assert len(kb.search("整机保修 12 个月", k=1, mode="keyword")) == 1
    hits = kb.search("人为损坏", k=3, mode="keyword")
    # the 保修范围 text is the same in every version: one passage, no siblings
    assert [h.chunk.section_path[-1] for h in hits].count("保修范围") == 1


def test_a_passage_every_version_holds_is_cited_from_the_newest(kb: KnowledgeBase) -> None:
    """The 保修范围 text is the same in versions 1 and 2 (and 3, which this caller may not
    read): whichever copy ranked first, the passage is version 2's, the newest the caller
    can read, so it is not shown as the superseded version's. Before, it was the copy that
    ranked first: version 1's when its title scored a hair higher."""
    (hit,) = [h for h in kb.search("人为损坏", k=3, mode="keyword") if "保修范围" in h.chunk.text]
    assert hit.chunk.chunk_id == "policy-v2.md::2"
    legal = UserContext(tenant_id="default", user_id="l", roles=["legal"])
    hits = kb.search("人为损坏", k=3, mode="keyword", user=legal)
    assert [h.chunk.chunk_id for h in hits if h.chunk.section_path[-1] == "保修范围"] == [
        "policy-v3.md::2"
    ]
    alone = replace(kb.search_options, version_siblings=False)  # as ranked, with siblings off
    (first, *_) = kb.search("人为损坏", k=3, mode="keyword", options=alone)
    assert first.chunk.section_path[-1] == "保修范围"


def test_siblings_can_be_switched_off(kb: KnowledgeBase) -> None:
    # only version 1 says "12": the other version comes along as a sibling, or not at all
    assert [h.chunk.chunk_id for h in kb.search("12", k=2, mode="keyword")] == [
        "policy-v1.md::1",
        "policy-v2.md::1",
    ]
    alone = replace(kb.search_options, version_siblings=False)
    found = kb.search("12", k=2, mode="keyword", options=alone)
    assert [h.chunk.chunk_id for h in found] == ["policy-v1.md::1"]


def test_the_sample_warranty_versions_come_together(
    tmp_path: Path, database_url: str | None
) -> None:
    with KnowledgeBase(tmp_path / "ws", None, database_url=database_url) as base:
        base.ingest([sample_corpus()])
        hits = base.search("整机保修期为自购买之日起 12 个月", k=2, mode="keyword")
        assert [h.chunk.source.rsplit("/", 1)[-1] for h in hits] == [
            "warranty-policy-v1.md",
            "warranty-policy-v2.md",
        ]


@pytest.mark.slow
def test_the_english_warranty_question_gets_both_versions_flagged(tmp_path: Path) -> None:
    # the case: an English question over the Chinese policies, the packaged embedders
    # (USE matches English to Chinese), the app's default relevance cut
    from shelfhand.core.settings import DEFAULT_MIN_RELEVANCE
    from shelfhand.knowledge.embeddings.local import default_router
    from shelfhand.knowledge.evidence.citations import (
        format_passages,
        prepare_evidence,
        to_citations,
    )

    with KnowledgeBase(
        tmp_path / "ws", default_router(), min_relevance=DEFAULT_MIN_RELEVANCE
    ) as base:
        base.ingest([sample_corpus()])
        question = "How long is the warranty?"
        hits = base.search(question, k=5)
        periods = {
            h.chunk.source.rsplit("/", 1)[-1]: h
            for h in hits
            if h.chunk.section_path[-1:] == ("保修期限",)
        }
        assert set(periods) == {"warranty-policy-v1.md", "warranty-policy-v2.md"}
        evidence = prepare_evidence(to_citations(hits), question)
        flagged = [c for c in evidence if c.conflicts_with]
        assert {c.source.rsplit("/", 1)[-1] for c in flagged} == set(periods)
        assert "12 个月 vs 24 个月" in format_passages(evidence)
        # and what the model is shown when it answers the question (up-front retrieval)
        seen: list[str] = []

        def answer(messages: Sequence[Message], tools: list[dict[str, Any]]) -> Any:
            seen.append(messages[-1].text)
            return text("24 个月 [1]")

        agent = Agent(
            model=FunctionModel(answer), toolkit=Toolkit([retrieve_tool(base)]), retrieval="context"
        )
        agent.run_sync(question)
        assert "Note: " in seen[0] and "12 个月 vs 24 个月" in seen[0]
