"""shelfhand: a bookshelf (cited retrieval) and hands (governed tools) for LLM agents.

The public names below are imported lazily so that ``import shelfhand`` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Agent": "shelfhand.agent.agent",
    "RunResult": "shelfhand.agent.agent",
    "ConversationMemory": "shelfhand.agent.memory",
    "KnowledgeAgent": "shelfhand.agent.retrieve",
    "Toolkit": "shelfhand.tools.toolkit",
    "Tool": "shelfhand.tools.tool",
    "ToolOutput": "shelfhand.tools.tool",
    "tool": "shelfhand.tools.tool",
    "GovernancePolicy": "shelfhand.tools.governance",
    "Approvals": "shelfhand.tools.approvals",
    "ApprovalDecision": "shelfhand.tools.approvals",
    "AuditLog": "shelfhand.tools.audit",
    "UserContext": "shelfhand.core.context",
    "RunContext": "shelfhand.core.context",
    "Message": "shelfhand.core.messages",
    "Citation": "shelfhand.core.messages",
    "Settings": "shelfhand.core.settings",
    "ShelfhandError": "shelfhand.core.errors",
    "ConfigurationError": "shelfhand.core.errors",
    "ToolError": "shelfhand.core.errors",
    "TransientToolError": "shelfhand.core.errors",
    "ModelError": "shelfhand.core.errors",
    "KnowledgeBase": "shelfhand.knowledge.base",
    "App": "shelfhand.app",
}

__all__ = [
    "Agent",
    "App",
    "ApprovalDecision",
    "Approvals",
    "AuditLog",
    "Citation",
    "ConfigurationError",
    "ConversationMemory",
    "GovernancePolicy",
    "KnowledgeAgent",
    "KnowledgeBase",
    "Message",
    "ModelError",
    "RunContext",
    "RunResult",
    "Settings",
    "ShelfhandError",
    "Tool",
    "ToolError",
    "ToolOutput",
    "Toolkit",
    "TransientToolError",
    "UserContext",
    "tool",
]

if TYPE_CHECKING:
    from shelfhand.agent.agent import Agent, RunResult
    from shelfhand.agent.memory import ConversationMemory
    from shelfhand.agent.retrieve import KnowledgeAgent
    from shelfhand.app import App
    from shelfhand.core.context import RunContext, UserContext
    from shelfhand.core.errors import (
        ConfigurationError,
        ModelError,
        ShelfhandError,
        ToolError,
        TransientToolError,
    )
    from shelfhand.core.messages import Citation, Message
    from shelfhand.core.settings import Settings
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.tools.approvals import ApprovalDecision, Approvals
    from shelfhand.tools.audit import AuditLog
    from shelfhand.tools.governance import GovernancePolicy
    from shelfhand.tools.tool import Tool, ToolOutput, tool
    from shelfhand.tools.toolkit import Toolkit


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shelfhand' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
