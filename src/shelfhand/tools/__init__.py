"""Hands: typed, permissioned tools for the model (docs/design.md T1–T4, T6).

``@tool`` turns a function into a :class:`Tool`; a :class:`Toolkit` holds tools and groups,
filters them per caller and runs the model's calls. Built-in tools live in
:mod:`shelfhand.tools.builtins`.
"""

from shelfhand.tools.approvals import ApprovalDecision, ApprovalRequest, Approvals
from shelfhand.tools.audit import AuditLog
from shelfhand.tools.governance import GovernancePolicy
from shelfhand.tools.tool import Tool, ToolOutput, tool
from shelfhand.tools.toolkit import Toolkit

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "Approvals",
    "AuditLog",
    "GovernancePolicy",
    "Tool",
    "ToolOutput",
    "Toolkit",
    "tool",
]
