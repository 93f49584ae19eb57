"""Test helpers for users' own tests (and shelfhand's): fake chat models and a fake embedder.

Everything here is deterministic and offline::

    from shelfhand.testing import ScriptedModel, text, tool_call

    model = ScriptedModel([
        tool_call("retrieve", {"query": "退货政策"}),
        text("拆封后 7 天内可退 [1]。"),
    ])

:class:`ScriptedModel` plays back a queue of turns and :class:`FunctionModel` computes each
turn with a function of the conversation (both live in :mod:`shelfhand.models.scripted`).
:class:`HashingEmbedder` embeds text by hashed word and character features: no model, no
download, the same vector for the same text in every process; give a knowledge base vectors
in a test with ``EmbeddingRouter({"any": HashingEmbedder()})``.
"""

from __future__ import annotations

from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.models.scripted import (
    CyclingScriptModel,
    FunctionModel,
    ModelTurn,
    ScriptedFailure,
    ScriptedModel,
    ScriptedText,
    ScriptedToolCall,
    failure,
    load_scripted_model,
    stream_pieces,
    text,
    tool_call,
)

__all__ = [
    "CyclingScriptModel",
    "EmbeddingRouter",
    "FunctionModel",
    "HashingEmbedder",
    "ModelTurn",
    "ScriptedFailure",
    "ScriptedModel",
    "ScriptedText",
    "ScriptedToolCall",
    "failure",
    "hashing_router",
    "load_scripted_model",
    "stream_pieces",
    "text",
    "tool_call",
]


def hashing_router(dim: int | None = None) -> EmbeddingRouter:
    """One vector space (``any``) embedded by a :class:`HashingEmbedder`: a knowledge base
    with vectors for tests, with no model to load."""
    return EmbeddingRouter({"any": HashingEmbedder() if dim is None else HashingEmbedder(dim)})
