"""shelfhand: a bookshelf (cited retrieval) and hands (governed tools) for LLM agents.

The public names below are imported lazily so that ``import shelfhand`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shelfhand.core.lazy import lazy_exports
from shelfhand.core.version import __version__ as __version__

_EXPORTS: dict[str, str] = {
    "Agent": "shelfhand.agent.agent",
    "RunResult": "shelfhand.core.results",
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
    "retrieve_tool": "shelfhand.agent.retrieve",
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
    "retrieve_tool",
    "tool",
]

if TYPE_CHECKING:
    from shelfhand.agent.agent import Agent
    from shelfhand.agent.memory import ConversationMemory
    from shelfhand.agent.retrieve import KnowledgeAgent, retrieve_tool
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
    from shelfhand.core.results import RunResult
    from shelfhand.core.settings import Settings
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.tools.approvals import ApprovalDecision, Approvals
    from shelfhand.tools.audit import AuditLog
    from shelfhand.tools.governance import GovernancePolicy
    from shelfhand.tools.tool import Tool, ToolOutput, tool
    from shelfhand.tools.toolkit import Toolkit


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
