"""The ``remember`` tool: the model saves a fact about the user into long-term memory.

It lives in the orchestration layer because it joins two capabilities (sessions and tools).
The caller's identity is injected, never a model-written argument.
"""

from __future__ import annotations

from typing import Any

from shelfhand.core.context import UserContext
from shelfhand.sessions.user_memory import UserMemoryStore
from shelfhand.tools.tool import Tool, tool

REMEMBER_TOOL = "remember"
"""The tool's name, also its name in the ``builtin_tools`` setting (opt-in)."""
REMEMBER_DESCRIPTION = (
    "Save a lasting fact or preference about the current user (their product model, preferred "
    "language, how they like answers) so that later conversations can use it. Save one short "
    "sentence per call, only for things worth knowing next time; never save secrets."
)


def make_remember_tool(store: UserMemoryStore) -> Tool[Any, Any]:
    """The ``remember`` tool over ``store`` (the caller's identity is injected, not an argument)."""

    def remember(ctx: UserContext, fact: str) -> str:
        """Save a fact or preference about the user for later conversations.

        Args:
            fact: One short sentence, e.g. "Owns the P20 projector" or "Prefers answers in English".
        """
        try:
            item = store.remember(ctx, fact)
        except ValueError as exc:
            return f"not saved: {exc}"
        return f"saved: {item.content}"

    return tool(name=REMEMBER_TOOL, description=REMEMBER_DESCRIPTION, idempotent=True)(remember)
