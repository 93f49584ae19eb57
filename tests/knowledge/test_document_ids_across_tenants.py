"""A ready-made document whose id another tenant's document holds is refused, on every
store (``open_stack``): ids are the store's, across tenants. Before, tenant t2's copy of
``manual.md`` either replaced t1's (both in one call: t1's search found nothing) or was
skipped as unchanged (the same content hash: t2 never got it), with no word of either."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shelfhand.core.context import UserContext
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.stack import EmbeddedKnowledge
from shelfhand.knowledge.types import Document
from shelfhand.testing import hashing_router
from support.knowledge import text_document

OpenStack = Callable[..., EmbeddedKnowledge]  # the open_stack fixture (conftest.py)
TEXT = "投影仪保修期为12个月。The projector warranty lasts twelve months."


def manual(tenant: str, doc_id: str = "manual.md", text: str = TEXT) -> Document:
    return text_document(doc_id, text, title="Manual", tenant_id=tenant)


@pytest.mark.parametrize("one_call", [True, False])
def test_another_tenants_document_id_is_refused_and_the_first_tenants_document_kept(
    open_stack: OpenStack, one_call: bool
) -> None:
    router: EmbeddingRouter = hashing_router()
    kb = open_stack(router)
    alice = UserContext(tenant_id="t1", user_id="alice")
    if one_call:
        with pytest.raises(InvalidArgumentError, match="stored for tenant 't1', not 't2'"):
            kb.ingestor.ingest_documents([manual("t1"), manual("t2")])
    else:
        kb.ingestor.ingest_documents([manual("t1")])
        with pytest.raises(InvalidArgumentError, match="document ids are the store's"):
            kb.ingestor.ingest_documents([manual("t2"), manual("t2", "t2/other.md", "其他。")])
    kb.store.sync()
    hits = kb.retriever.search("保修期", k=5, user=alice, mode="keyword")
    assert [h.chunk.doc_id for h in hits] == ["manual.md"]  # t1's, whole
    assert (kb.store.get_document_state("manual.md") or ("", ""))[1] == "t1"
    # the same tenant writing its document again is no conflict
    kb.ingestor.ingest_documents([manual("t1", text=TEXT + " 保修卡请妥善保管。")])
    assert kb.store.get_document_state("t2/other.md") is None
