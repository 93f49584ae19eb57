"""Over SSE, a tool call the model wrote as text is run, never sent as ``text_delta`` (issue 9.1),
and the text of successive steps arrives separated. Same app as ``shelfhand serve``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from service_helpers import ALICE, ThreadServer, parse_sse, start_thread_server, user_contexts

from shelfhand.agent.streaming import STEP_SEPARATOR
from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import ScriptedModel, text

DOC = "# Returns\n\nUnopened projectors can be returned within 30 days for a full refund.\n"
CALL = '{"name": "retrieve", "arguments": {"query": "return unopened projector"}}'


def serve(workspace: Path, model: Any, servers: list[ThreadServer]) -> ThreadServer:
    # the model scripts the turn from its first request: no up-front retrieval before it
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    settings = Settings.load(workspace, env=env)
    app = App(settings=settings, model=model, router=EmbeddingRouter({"any": HashingEmbedder()}))
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    servers.append(server)
    return server


def test_text_tool_calls_never_reach_the_sse_text_deltas(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    model = ScriptedModel(
        [
            text(f"Let me look that up.\n```json\n{CALL}\n```"),
            text(f"<tool_call>{CALL}</tool_call>"),
            text("Unopened projectors can be returned within 30 days [1]."),
        ]
    )
    server = serve(tmp_path, model, thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        up = c.post("/v1/knowledge/files", files=[("files", ("returns.md", DOC.encode()))])
        assert up.status_code == 200, up.text
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "return unopened?"})
        events = parse_sse(r.text)

    deltas = [e["text"] for e in events if e["type"] == "text_delta"]
    shown = "".join(deltas)
    assert "{" not in shown and "```" not in shown and "tool_call" not in shown, deltas
    answer = "Unopened projectors can be returned within 30 days [1]."
    assert shown == "Let me look that up." + STEP_SEPARATOR + answer
    kinds = [e["type"] for e in events]
    assert kinds.count("tool_started") == 2 and kinds.count("tool_finished") == 2
    assert kinds.index("tool_started") > kinds.index("text_delta")
    final = events[-1]
    assert final["type"] == "final" and final["output"] == answer
    assert final["citations"] and final["citations"][0]["source"] == "t1/returns.md"
