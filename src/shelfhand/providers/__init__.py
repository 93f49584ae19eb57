"""Adapters to vendors' APIs: the OpenAI-compatible chat and embeddings endpoints.

::

    from shelfhand.providers import OpenAIChatModel
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shelfhand.core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "OpenAIChatModel": "shelfhand.providers.openai_chat",
    "OpenAIEmbedder": "shelfhand.providers.openai_embeddings",
    "tools_prompt": "shelfhand.providers.tool_modes",
}

__all__ = [
    "OpenAIChatModel",
    "OpenAIEmbedder",
    "tools_prompt",
]

if TYPE_CHECKING:
    from shelfhand.providers.openai_chat import OpenAIChatModel
    from shelfhand.providers.openai_embeddings import OpenAIEmbedder
    from shelfhand.providers.tool_modes import tools_prompt

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
