"""The public surface is small and deliberate: changing it must be a conscious act."""

from __future__ import annotations

import subprocess
import sys

import shelfhand

PUBLIC = {
    "Agent", "App", "ApprovalDecision", "Approvals", "AuditLog", "Citation", "ConfigurationError",
    "ConversationMemory", "GovernancePolicy", "KnowledgeAgent", "KnowledgeBase", "Message",
    "ModelError", "RunContext", "RunResult", "Settings", "ShelfhandError", "Tool", "ToolError",
    "ToolOutput", "Toolkit", "TransientToolError", "UserContext", "tool",
}  # fmt: skip


def test_the_public_names_are_exactly_these() -> None:
    assert set(shelfhand.__all__) == PUBLIC


def test_every_public_name_imports() -> None:
    for name in PUBLIC:
        assert getattr(shelfhand, name) is not None


def test_importing_the_package_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, shelfhand; "
        "heavy = [m for m in ('pydantic', 'numpy', 'openai', 'tantivy', 'faiss', 'onnxruntime') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
