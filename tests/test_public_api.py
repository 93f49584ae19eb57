"""The public surface is small and deliberate: changing it must be a conscious act."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import shelfhand

PUBLIC = {
    "Agent", "App", "ApprovalDecision", "Approvals", "AuditLog", "Citation", "ConfigurationError",
    "ConversationMemory", "GovernancePolicy", "KnowledgeAgent", "KnowledgeBase", "Message",
    "ModelError", "RunContext", "RunResult", "Settings", "ShelfhandError", "Tool", "ToolError",
    "ToolOutput", "Toolkit", "TransientToolError", "UserContext", "retrieve_tool", "tool",
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


# The documented modules and their public names: what the README, the docs and the examples
# import. Changing one is a conscious act; everything they import must be listed here.
DOCUMENTED: dict[str, set[str]] = {
    "shelfhand": PUBLIC,
    "shelfhand.testing": {
        "CyclingScriptModel", "EmbeddingRouter", "FunctionModel", "HashingEmbedder", "ModelTurn",
        "ScriptedFailure", "ScriptedModel", "ScriptedText", "ScriptedToolCall", "failure",
        "hashing_router", "load_scripted_model", "stream_pieces", "text", "tool_call",
    },
    "shelfhand.knowledge": {
        "Chunk", "Document", "Embedder", "EmbeddingRouter", "HashingEmbedder", "HttpReranker",
        "KnowledgeBase", "KnowledgeStatus", "ReadLimits", "Reranker", "Scope", "SearchCounts",
        "SearchHit", "SearchMode", "SearchOptions", "SearchResult", "SearchTimings",
        "default_router", "format_passages", "label", "prepare_evidence", "sample_corpus",
    },
    "shelfhand.agent": {
        "Agent", "AnswerCheck", "ConversationMemory", "DEFAULT_SYSTEM_PROMPT", "KnowledgeAgent",
        "LlmReranker", "ModelJudge", "QueryRewriter", "RerankJudge", "Subagent", "Supervisor", "as_tool",
        "check_grounding",
        "conditional", "extractive_answer", "fan_out", "retrieve_tool", "sequential",
    },
    "shelfhand.tools": {
        "ApprovalDecision", "ApprovalRequest", "Approvals", "AuditLog", "GovernancePolicy", "Tool",
        "ToolOutput", "Toolkit", "tool",
    },
    "shelfhand.tools.demo": {
        "DEMO_TENANT", "DEMO_USER", "RETRIEVE_EXAMPLES", "TOOL_EXAMPLES", "demo_database",
        "make_tools",
    },
    "shelfhand.models": {
        "ChatModel", "ModelResponse", "StreamChunk", "StreamDone", "StreamText", "ToolSchema",
        "Usage",
    },
    "shelfhand.providers": {"OpenAIChatModel", "OpenAIEmbedder", "tools_prompt"},
    "shelfhand.providers.a2a_client": {"RemoteA2AAgent"},  # the a2a extra
    "shelfhand.api": {"ServiceConfig", "build_service", "create_app"},
    "shelfhand.mcp": {
        "DEFAULT_OUTPUT_LIMIT", "DEFAULT_TIMEOUT", "McpServer", "McpServerGroup", "McpTool",
        "ResourceTool", "ServerConfig", "ServerOptions", "SseServer", "StdioServer",
        "StreamableHttpServer", "ToolFilter", "ToolSettings", "find_mcp_config",
        "load_mcp_config", "parse_mcp_config", "refuse_stdio", "servers_from_config",
    },
    "shelfhand.core.context": {
        "ANONYMOUS", "PRIVILEGED_ROLES", "PermissionLevel", "RunContext", "UserContext",
        "permission_rank",
    },
    "shelfhand.core.pricing": {"ModelPrice", "PriceTable", "parse_prices"},
    "shelfhand.core.tracing": {
        "Span", "SpanEvent", "SpanKind", "SpanList", "SpanProcessor", "TraceProcessor", "Tracer",
        "current_span", "enter", "format_traceparent", "leave", "new_span_id",
        "new_trace_id", "parse_traceparent", "set_default_tracer", "start_span", "tracing_on",
    },
    "shelfhand.traces": {
        "SpanRecord", "SqlTraceStore", "SqliteTraceStore", "StoreRecorder", "TraceSummary",
    },
    "shelfhand.core.errors": set(),  # every class of the error tree: checked below
    "shelfhand.core.events": set(),  # every event class: checked below
    "shelfhand.core.messages": set(),
}  # fmt: skip

ROOT = Path(__file__).resolve().parents[1]
IMPORT = re.compile(r"^\s*from (shelfhand[\w.]*) import (?:\(([^)]*)\)|([^\n(]*))", re.M)


def _documented_imports() -> list[tuple[str, str, str]]:
    texts = [ROOT / "README.md", *sorted((ROOT / "examples").glob("*.py"))]
    docs = ROOT / "docs"
    if docs.is_dir():
        texts += sorted(docs.rglob("*.md"))
    found = []
    for path in texts:
        for module, grouped, line in IMPORT.findall(path.read_text(encoding="utf-8")):
            for name in re.split(r"[,\s]+", (grouped or line).split("#")[0].strip()):
                if name and not name.startswith("#"):
                    found.append((path.name, module, name.split(" as ")[0]))
    return found


@pytest.mark.parametrize("module", sorted(m for m, names in DOCUMENTED.items() if names))
def test_each_documented_module_exports_exactly_its_public_names(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == DOCUMENTED[module]
    for name in mod.__all__:
        assert getattr(mod, name) is not None


def test_the_readme_docs_and_examples_import_only_documented_names() -> None:
    found = _documented_imports()
    assert found, "no imports found: the pattern is wrong"
    for where, module, name in found:
        assert module in DOCUMENTED, f"{where} imports from {module}, which is not documented"
        public = DOCUMENTED[module] or set(importlib.import_module(module).__all__)
        assert name in public, f"{where} imports {name} from {module}, not a public name there"


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("shelfhand.knowledge.embedders", "default_router", "shelfhand.knowledge"),
        ("shelfhand.knowledge.embedding", "EmbeddingRouter", "shelfhand.knowledge"),
        ("shelfhand.knowledge.citations", "format_passages", "shelfhand.knowledge"),
        ("shelfhand.demo", "make_tools", "shelfhand.tools.demo"),
    ],
)
def test_a_moved_import_path_still_works_with_a_deprecation_warning(
    old: str, name: str, new: str
) -> None:
    with pytest.warns(DeprecationWarning, match=f"import {name} from {new}"):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)


def test_kb_as_tool_still_works_with_a_deprecation_warning(tmp_path: Path) -> None:
    from shelfhand.knowledge import KnowledgeBase

    with (
        KnowledgeBase(tmp_path, None, mode="keyword") as kb,
        pytest.warns(DeprecationWarning, match="retrieve_tool"),
    ):
        tool = kb.as_tool()
    assert tool.name == "retrieve"


def test_every_error_a_user_can_see_has_a_stable_code() -> None:
    from shelfhand.core import errors

    classes = [getattr(errors, n) for n in errors.__all__]
    assert all(issubclass(c, errors.ShelfhandError) for c in classes)
    codes = [c.code for c in classes if c not in (errors.TurnFailed, errors.UploadRejected)]
    assert all(isinstance(code, str) and code for code in codes)
    assert len(set(codes)) == len(codes), "two error classes share a code"
