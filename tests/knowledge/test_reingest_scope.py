"""A file ingested again for another tenant, or with other permission tags, is stored again
with them, on every store. It used to be "unchanged" (its bytes were), so the documents stayed
with the first tenant, or readable by roles the operator had just taken away."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from shelfhand.core.context import UserContext
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.ingest.ingestor import ingest_key
from shelfhand.knowledge.stack import EmbeddedKnowledge
from shelfhand.knowledge.types import Document, Section

OpenStack = Callable[..., EmbeddedKnowledge]  # the open_stack fixture (conftest.py)

TEXT = "# 退货政策\n\n客户可在三十天内退货。错误代码 E-203 表示电源故障。\n"


def _sources(stack: EmbeddedKnowledge, query: str, user: UserContext) -> list[str]:
    return [h.chunk.source for h in stack.retriever.search(query, k=3, user=user)]


def test_a_file_ingested_for_another_tenant_moves_to_it(
    open_stack: OpenStack, tmp_path: Path
) -> None:
    folder = tmp_path / "手册"
    folder.mkdir()
    (folder / "退货.md").write_text(TEXT, encoding="utf-8")
    acme = UserContext(tenant_id="acme", user_id="a1")
    beta = UserContext(tenant_id="beta", user_id="b1")
    stack = open_stack(EmbeddingRouter({"default": HashingEmbedder()}))
    try:
        first = stack.ingestor.ingest([folder], tenant_id="acme")
        assert first.added == ("手册/退货.md",)
        assert _sources(stack, "E-203 电源故障", acme) == ["手册/退货.md"]

        moved = stack.ingestor.ingest([folder], tenant_id="beta")
        assert moved.updated == ("手册/退货.md",) and moved.unchanged == ()
        assert _sources(stack, "E-203 电源故障", beta) == ["手册/退货.md"]
        assert _sources(stack, "E-203 电源故障", acme) == []

        again = stack.ingestor.ingest([folder], tenant_id="beta")
        assert again.unchanged == ("手册/退货.md",) and again.chunks == 0
    finally:
        stack.close()


def test_narrowed_permission_tags_take_effect(open_stack: OpenStack, tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "returns.md").write_text(TEXT, encoding="utf-8")
    staff = UserContext(tenant_id="acme", user_id="s1")
    hr = UserContext(tenant_id="acme", user_id="h1", roles=("hr",))
    stack = open_stack(EmbeddingRouter({"default": HashingEmbedder()}))
    try:
        stack.ingestor.ingest([folder], tenant_id="acme")
        assert _sources(stack, "E-203", staff) == ["policies/returns.md"]

        narrowed = stack.ingestor.ingest(
            [folder], tenant_id="acme", permission_tags=["hr", "legal"]
        )
        assert narrowed.updated == ("policies/returns.md",)
        assert _sources(stack, "E-203", staff) == []
        assert _sources(stack, "E-203", hr) == ["policies/returns.md"]

        # the same tags in another order (or repeated) are the same scope: unchanged
        same = stack.ingestor.ingest(
            [folder], tenant_id="acme", permission_tags=["legal", "hr", "hr"]
        )
        assert same.unchanged == ("policies/returns.md",)

        widened = stack.ingestor.ingest([folder], tenant_id="acme")
        assert widened.updated == ("policies/returns.md",)
        assert _sources(stack, "E-203", staff) == ["policies/returns.md"]
    finally:
        stack.close()


def _document(tags: tuple[str, ...]) -> Document:
    return Document(
        doc_id="acme/crm#42",
        source="crm",
        title="退货政策",
        doc_type="json",
        sections=(Section(text=TEXT, section_path=("退货政策",)),),
        content_hash="cd" * 32,
        permission_tags=tags,
        tenant_id="acme",
    )


def test_ready_made_documents_take_narrowed_tags_too(open_stack: OpenStack) -> None:
    # ingest_documents compared the text's hash alone: a record whose roles were narrowed
    # in the system it came from was "unchanged", and stayed readable by everyone
    staff = UserContext(tenant_id="acme", user_id="s1")
    hr = UserContext(tenant_id="acme", user_id="h1", roles=("hr",))
    stack = open_stack(EmbeddingRouter({"default": HashingEmbedder()}))
    try:
        assert stack.ingestor.ingest_documents([_document(())]).added == ("acme/crm#42",)
        assert _sources(stack, "E-203", staff) == ["crm"]
        assert stack.ingestor.ingest_documents([_document(())]).unchanged == ("acme/crm#42",)

        narrowed = stack.ingestor.ingest_documents([_document(("hr",))])
        assert narrowed.updated == ("acme/crm#42",)
        assert _sources(stack, "E-203", staff) == []
        assert _sources(stack, "E-203", hr) == ["crm"]
        assert stack.ingestor.ingest_documents([_document(("hr",))]).unchanged == ("acme/crm#42",)

        widened = stack.ingestor.ingest_documents([_document(())])
        assert widened.updated == ("acme/crm#42",)
        assert _sources(stack, "E-203", staff) == ["crm"]
    finally:
        stack.close()


def test_the_default_scope_keeps_the_plain_file_hash() -> None:
    """Stores written before the key hold the plain hash: their default-tenant files stay
    unchanged, and any other scope differs from it (and from each other)."""
    plain = "ab" * 32
    assert ingest_key(plain, "default", ()) == plain
    keys = {
        ingest_key(plain, "default", ()),
        ingest_key(plain, "acme", ()),
        ingest_key(plain, "default", ("hr",)),
        ingest_key(plain, "acme", ("hr",)),
        ingest_key(plain, "acme", ("hr", "legal")),
        ingest_key(plain, "acme\0hr", ()),
    }
    assert len(keys) == 6
