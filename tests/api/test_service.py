"""The service with fakes a subprocess cannot hold: models that wait for the test or record
what they were asked. Same app as ``shelfhand serve``, served by uvicorn in a thread."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
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
from shelfhand.tools.tool import tool


def make_app(workspace: Path, model: Any | None, **env: str) -> App:
    # these models script the turn from its first request: no up-front retrieval before it
    # (the default, ``both``, is covered by tests/api/test_service_answer_retrieval.py)
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool", **env}
    settings = Settings.load(workspace, env=env)
    return App(settings=settings, model=model, router=EmbeddingRouter({"any": HashingEmbedder()}))


def serve_app(
    workspace: Path,
    model: Any | None,
    servers: list[ThreadServer],
    env: dict[str, str] | None = None,
    **config: Any,
) -> ThreadServer:
    api = create_app(
        make_app(workspace, model, **(env or {})),
        config=ServiceConfig(**config),
        api_keys=user_contexts(),
    )
    server = start_thread_server(api)
    servers.append(server)
    return server


def last_user_text(messages: list[Message]) -> str:
    return next(m.text for m in reversed(messages) if m.role == "user")


def test_a_second_message_while_a_turn_runs_gets_409_and_other_sessions_run_concurrently(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    entered = threading.Semaphore(0)
    release = threading.Event()

    async def slow(messages: list[Message], tools: Any) -> str:
        entered.release()
        await asyncio.to_thread(release.wait, 10)
        return "done: " + last_user_text(messages)

    server = serve_app(tmp_path, FunctionModel(slow), thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        a = c.post("/v1/sessions").json()["id"]
        b = c.post("/v1/sessions").json()["id"]
        results: dict[str, httpx.Response] = {}

        def send(session: str, content: str) -> None:
            results[session] = c.post(
                f"/v1/sessions/{session}/messages", json={"content": content, "stream": False}
            )

        threads = [threading.Thread(target=send, args=(s, f"hello {s[:4]}")) for s in (a, b)]
        threads[0].start()
        assert entered.acquire(timeout=10)  # session a's turn is inside the model
        busy = c.post(f"/v1/sessions/{a}/messages", json={"content": "again", "stream": False})
        assert busy.status_code == 409 and busy.headers["retry-after"] == "1"
        assert busy.json()["code"] == "session_busy"
        assert c.delete(f"/v1/sessions/{a}").status_code == 409
        threads[1].start()
        assert entered.acquire(timeout=10)  # session b runs while a still waits
        release.set()
        for t in threads:
            t.join(timeout=10)
    assert results[a].status_code == results[b].status_code == 200
    assert results[a].json()["output"] == f"done: hello {a[:4]}"


def test_short_term_memory_comes_back_after_a_restart(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    seen: list[list[Message]] = []

    def model(messages: list[Message], tools: Any) -> str:
        seen.append(messages)
        return "好的，记下了。" if len(seen) == 1 else "您的订单号是 A-1001。"

    first = serve_app(tmp_path, FunctionModel(model), thread_servers)
    with httpx.Client(base_url=first.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        c.post(f"/v1/sessions/{session}/messages", json={"content": "我的订单号是 A-1001"})
    first.stop()

    second = serve_app(tmp_path, FunctionModel(model), thread_servers)
    with httpx.Client(base_url=second.url, headers=ALICE, timeout=30) as c:
        r = c.post(
            f"/v1/sessions/{session}/messages",
            json={"content": "我的订单号是多少？", "stream": False},
        )
    assert r.json()["output"] == "您的订单号是 A-1001。"
    history = [(m.role, m.text) for m in seen[1]]
    assert ("user", "我的订单号是 A-1001") in history
    assert ("assistant", "好的，记下了。") in history
    assert history[-1] == ("user", "我的订单号是多少？")


def test_remembered_facts_reach_later_sessions_in_their_own_section_and_stay_in_their_tenant(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    systems: list[tuple[str, str]] = []

    def model(messages: list[Message], tools: list[Any]) -> Any:
        systems.append((last_user_text(messages), messages[0].text))
        if messages[-1].role == "user" and messages[-1].text.startswith("记住"):
            return tool_call("remember", {"fact": "用户的投影仪型号是 P20，偏好中文回答"})
        return text("好的。")

    opted = {"SHELFHAND_BUILTIN_TOOLS": "remember"}  # long-term memory is opt-in
    server = serve_app(tmp_path, FunctionModel(model), thread_servers, opted)
    with (
        httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as alice,
        httpx.Client(base_url=server.url, headers=BOB, timeout=30) as bob,
        httpx.Client(base_url=server.url, headers=CAROL, timeout=30) as carol,
    ):
        s1 = alice.post("/v1/sessions").json()["id"]
        r = alice.post(
            f"/v1/sessions/{s1}/messages", json={"content": "记住我的型号是 P20", "stream": False}
        )
        assert r.json()["tool_steps"][0]["content"].startswith("saved:")
        s2 = alice.post("/v1/sessions").json()["id"]
        alice.post(f"/v1/sessions/{s2}/messages", json={"content": "新问题", "stream": False})
        for other in (bob, carol):
            s = other.post("/v1/sessions").json()["id"]
            other.post(
                f"/v1/sessions/{s}/messages", json={"content": "别人的问题", "stream": False}
            )
        memories = alice.get("/v1/memories").json()["memories"]
        assert [m["content"] for m in memories] == ["用户的投影仪型号是 P20，偏好中文回答"]
        assert bob.get("/v1/memories").json()["memories"] == []
        assert bob.delete(f"/v1/memories/{memories[0]['id']}").status_code == 404
        assert alice.delete(f"/v1/memories/{memories[0]['id']}").status_code == 204

    later = dict(systems)["新问题"]
    assert "## Memory (what you know about this user)\n- 用户的投影仪型号是 P20" in later
    assert all("P20" not in system for asked, system in systems if asked == "别人的问题")


@pytest.mark.anyio
async def test_a_confirmation_tool_waits_for_the_callers_approval_over_the_api(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    def model(messages: list[Message], tools: Any) -> Any:
        if messages[-1].role == "user":
            return tool_call("create_return", {"order_id": "A-1001", "reason": "坏了"})
        return text("退货单已创建：" + messages[-1].tool_results[0].content)

    server = serve_app(tmp_path, FunctionModel(model), thread_servers)

    @tool(confirm=True)
    def create_return(order_id: str, reason: str) -> str:
        """Create a return for an order."""
        return f"RMA-{order_id}"

    server.service.toolkit.add(create_return)
    async with (
        httpx.AsyncClient(base_url=server.url, headers=ALICE, timeout=30) as alice,
        httpx.AsyncClient(base_url=server.url, headers=CAROL, timeout=30) as carol,
    ):
        session = (await alice.post("/v1/sessions")).json()["id"]
        kinds: list[str] = []
        final: dict[str, Any] = {}
        with anyio.fail_after(20):
            async with alice.stream(
                "POST", f"/v1/sessions/{session}/messages", json={"content": "帮我退货"}
            ) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    kinds.append(event["type"])
                    if event["type"] == "approval_required":
                        url = f"/v1/sessions/{session}/approvals/{event['approval_id']}"
                        assert (await carol.post(url, json={"approved": True})).status_code == 404
                        ok = await alice.post(url, json={"approved": True})
                        assert ok.status_code == 200 and ok.json()["approved"] is True
                        again = await alice.post(url, json={"approved": False})
                        assert again.status_code == 404
                    if event["type"] == "final":
                        final = event
    assert kinds.index("approval_required") < kinds.index("tool_finished")
    assert final["output"] == "退货单已创建：RMA-A-1001"


def test_without_a_chat_model_answers_are_the_passages_sentences_and_readyz_says_so(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve_app(tmp_path, None, thread_servers)
    doc = "# Returns\n\nUnopened projectors can be returned within 30 days for a full refund.\n"
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        up = c.post("/v1/knowledge/files", files=[("files", ("returns.md", doc.encode()))])
        assert up.status_code == 200, up.text
        ready = c.get("/readyz").json()
        assert ready["status"] == "ready" and ready["model"].startswith("not configured")
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(
            f"/v1/sessions/{session}/messages", json={"content": "return unopened projector"}
        )
        events = parse_sse(r.text)
    assert [e["type"] for e in events] == ["citations", "text_delta", "final"]
    assert events[-1]["citations"][0]["source"] == "t1/returns.md"
    assert "30 days" in events[-1]["output"] and "[1]" in events[-1]["output"]
    assert events[-1]["output"].startswith("From the documents:") and events[-1]["extractive"]


def test_without_a_chat_model_a_follow_up_is_searched_with_the_question_before_it(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    # each message was searched alone: "怎么修？" after "E-203 是什么故障？" was not covered
    server = serve_app(tmp_path, None, thread_servers)
    codes = (
        "# 故障代码\n\n## E-203\n\nE-203 表示灯泡过热。处理：关机等待 30 分钟，清洁防尘网后再开机。\n\n"
        "## E-101\n\nE-101 表示遥控器电量不足。处理：更换电池。\n"
    )
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        up = c.post("/v1/knowledge/files", files=[("files", ("故障.md", codes.encode()))])
        assert up.status_code == 200, up.text
        session = c.post("/v1/sessions").json()["id"]
        answers = []
        for question in ("E-203 是什么故障？", "怎么修？", "退货要手续费吗？"):
            r = c.post(f"/v1/sessions/{session}/messages", json={"content": question})
            answers.append(parse_sse(r.text)[-1]["output"])
        other = c.post("/v1/sessions").json()["id"]  # another session has no question before
        alone = c.post(f"/v1/sessions/{other}/messages", json={"content": "怎么修？"})
    first, follow_up, new_topic = answers
    assert "灯泡过热" in first
    assert "清洁防尘网" in follow_up and "E-101" not in follow_up
    assert "文档中没有" in new_topic  # a new topic is searched as typed
    assert "清洁防尘网" not in parse_sse(alone.text)[-1]["output"]


def test_the_tool_list_is_what_the_model_may_call_for_this_caller(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve_app(tmp_path, None, thread_servers)

    @tool(permission="admin")
    def reindex() -> str:
        """Rebuild every index."""
        return "ok"

    server.service.toolkit.add(reindex)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        tools = {t["name"]: t for t in c.get("/v1/tools").json()["tools"]}
    # built-ins (remember too) are opt-in: a document question is offered retrieve
    assert {"retrieve"} == set(tools) and "reindex" not in tools
    assert set(tools["retrieve"]["parameters"]["properties"]) == {"query", "top_k"}
    assert tools["retrieve"]["read_only"] is True


@pytest.mark.parametrize(
    ("opted", "offered"), [("", ["retrieve"]), ("remember", ["remember", "retrieve"])]
)
def test_a_document_question_is_offered_retrieve_alone_unless_more_is_opted_in(
    tmp_path: Path, thread_servers: list[ThreadServer], opted: str, offered: list[str]
) -> None:
    seen: list[list[str]] = []

    def model(messages: list[Message], tools: list[Any]) -> str:
        seen.append(sorted(t["function"]["name"] for t in tools))
        return "退货期限是 7 天。"

    env = {"SHELFHAND_ANSWER_RETRIEVAL": "both", "SHELFHAND_BUILTIN_TOOLS": opted}
    server = serve_app(tmp_path, FunctionModel(model), thread_servers, env)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(
            f"/v1/sessions/{session}/messages",
            json={"content": "退货期限是多久？", "stream": False},
        )
        listed = sorted(t["name"] for t in c.get("/v1/tools").json()["tools"])

    assert r.status_code == 200, r.text
    assert seen == [offered] and listed == offered


def test_the_openapi_schema_publishes_the_v1_routes(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve_app(tmp_path, None, thread_servers)
    schema = httpx.get(server.url + "/openapi.json", timeout=10).json()
    paths: dict[str, Callable[..., Any]] = schema["paths"]
    for path in (
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/messages",
        "/v1/sessions/{session_id}/approvals/{approval_id}",
        "/v1/knowledge/files",
        "/v1/knowledge/sources",
        "/v1/knowledge/search",
        "/v1/tools",
        "/healthz",
        "/readyz",
    ):
        assert path in paths, path
    assert "HTTPBearer" in schema["components"]["securitySchemes"]


def test_uploads_with_permission_tags_are_found_only_by_callers_with_those_roles(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    from service_helpers import DORA

    server = serve_app(tmp_path, None, thread_servers)
    doc = "# Salaries\n\nThe Q3 bonus pool for the projector team is 120,000.\n"
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as alice:
        bad = alice.post(
            "/v1/knowledge/files", data={"tags": ["no spaces allowed"]},
            files=[("files", ("pay.md", doc.encode()))],
        )  # fmt: skip
        assert bad.status_code == 422 and "tags" in bad.text
        up = alice.post(
            "/v1/knowledge/files",
            data={"tags": ["hr"]},
            files=[("files", ("pay.md", doc.encode()))],
        )
        assert up.status_code == 200, up.text
        hidden = alice.get("/v1/knowledge/search", params={"q": "bonus pool", "top_k": 5}).json()
    with httpx.Client(base_url=server.url, headers=DORA, timeout=30) as dora:
        seen = dora.get("/v1/knowledge/search", params={"q": "bonus pool", "top_k": 5}).json()
    assert all(h["source"] != "t1/pay.md" for h in hidden["results"])
    assert any(h["source"] == "t1/pay.md" for h in seen["results"])
