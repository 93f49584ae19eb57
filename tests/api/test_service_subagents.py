"""The service with subagents in the workspace (issue 12): a supervisor answers, its events
reach SSE, background tasks are listed per session and cancelled with it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from service_helpers import (
    ALICE,
    BOB,
    CAROL,
    ThreadServer,
    parse_sse,
    start_thread_server,
    user_contexts,
)

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import FunctionModel, text, tool_call

RESEARCHER = """---
description: Researches a question with the calculator.
tools: [calculator]
max_iters: 3
---
You are the researcher.
"""


class Models:
    """One model for every part: the researcher's turns are told apart by its prompt."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    async def turn(self, messages: Sequence[Message], tools: list[dict[str, Any]]) -> object:
        last = messages[-1]
        if "You are the researcher" in messages[0].text:
            if "forever" in last.text:
                try:
                    await asyncio.Event().wait()  # until the task is cancelled
                finally:
                    self.cancelled.set()
            if last.role == "tool":
                return text(f"研究结果：{last.tool_results[0].content}")
            return tool_call("calculator", {"expression": "6*7"})
        if last.role == "tool":
            return text("答案是 42。")
        if "后台" in last.text:
            return tool_call(
                "agent_spawn", {"subagent": "researcher", "task": "work forever", "timeout": 0}
            )
        return tool_call("researcher", {"task": "6 乘 7 是多少？"})


def serve(workspace: Path, model: Any, servers: list[ThreadServer]) -> ThreadServer:
    (workspace / "agents").mkdir(parents=True)
    (workspace / "agents" / "researcher.md").write_text(RESEARCHER, encoding="utf-8")
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    settings = Settings.load(workspace, env=env)
    app = App(settings=settings, model=model, router=EmbeddingRouter({"any": HashingEmbedder()}))
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    servers.append(server)
    return server


def test_a_message_is_answered_by_the_supervisor_with_subagent_events_over_sse(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    models = Models()
    server = serve(tmp_path, FunctionModel(models.turn), thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "6 乘 7？"})
        assert r.status_code == 200, r.text
        events = parse_sse(r.text)
    kinds = [(e["type"], e.get("subagent") or e.get("name"), e.get("agent")) for e in events]
    assert ("subagent_started", "researcher", None) in kinds
    assert ("tool_started", "calculator", "researcher") in kinds
    assert ("subagent_finished", "researcher", None) in kinds
    started = next(e for e in events if e["type"] == "subagent_started")
    assert started["depth"] == 1
    assert events[-1]["type"] == "final" and events[-1]["output"] == "答案是 42。"


def test_background_tasks_are_listed_per_session_and_cancelled_with_it(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    models = Models()
    server = serve(tmp_path, FunctionModel(models.turn), thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(
            f"/v1/sessions/{session}/messages",
            json={"content": "后台研究"},
            headers={"Accept": "application/json"},
        )
        assert r.status_code == 200, r.text
        listed = c.get(f"/v1/sessions/{session}/tasks")
        assert listed.status_code == 200, listed.text
        (task,) = listed.json()["tasks"]
        assert (task["subagent"], task["status"], task["task"]) == (
            "researcher",
            "running",
            "work forever",
        )
        # another user of the tenant, another tenant: not their session
        assert c.get(f"/v1/sessions/{session}/tasks", headers=CAROL).status_code == 404
        assert c.get(f"/v1/sessions/{session}/tasks", headers=BOB).status_code == 404
        assert c.delete(f"/v1/sessions/{session}").status_code == 204
        assert models.cancelled.wait(10)
        assert c.get(f"/v1/sessions/{session}/tasks").status_code == 404
