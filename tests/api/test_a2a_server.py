"""The A2A server, driven by the official ``a2a-sdk`` client against a real server on
127.0.0.1: the agent card, send, stream, get, list, cancel, and task ownership."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("a2a", reason="the a2a extra is not installed")

from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError
from service_helpers import ThreadServer
from test_openai_endpoint import held_model, retrieve_then_quote, serve, with_documents

from shelfhand.core.messages import Message as ShelfMessage
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call

pytestmark = pytest.mark.anyio


def request(content: str, *, context_id: str = "") -> SendMessageRequest:
    message = Message(
        role=Role.ROLE_USER,
        parts=[Part(text=content)],
        message_id=uuid.uuid4().hex,
        context_id=context_id,
    )
    return SendMessageRequest(message=message)


async def a2a_client(server: ThreadServer, key: str, **config: Any) -> Any:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return await create_client(server.url, client_config=ClientConfig(httpx_client=http, **config))


def answer_of(responses: list[StreamResponse]) -> str:
    texts = []
    for r in responses:
        if r.HasField("artifact_update"):
            texts += [p.text for p in r.artifact_update.artifact.parts]
        if r.HasField("task"):
            for artifact in r.task.artifacts:
                texts += [p.text for p in artifact.parts]
    return "".join(texts)


@pytest.fixture
def server(tmp_path: Path, thread_servers: list[ThreadServer]) -> ThreadServer:
    model = FunctionModel(retrieve_then_quote)
    return with_documents(serve(tmp_path, model, thread_servers), tmp_path)


async def test_the_agent_card_names_the_endpoint_the_skills_and_bearer_auth(
    server: ThreadServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as h:
        card = (await h.get("/.well-known/agent-card.json")).json()
        same = (await h.get("/a2a/shelfhand/.well-known/agent-card.json")).json()
    assert card == same
    interface = card["supportedInterfaces"][0]
    assert interface["url"] == server.url + "/a2a/shelfhand"
    assert interface["protocolVersion"] == "1.0"
    assert "retrieve" in [s["id"] for s in card["skills"]]
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
    assert card["url"] == server.url + "/a2a/shelfhand"  # the 0.3 field, for 0.3 clients


async def test_a_streamed_message_answers_with_citations_and_completes(
    server: ThreadServer,
) -> None:
    client = await a2a_client(server, "key-alice")
    responses = [r async for r in client.send_message(request("投影仪保修多久？"))]
    assert "12 个月" in answer_of(responses)
    last_artifact = [r for r in responses if r.HasField("artifact_update")][-1]
    citations = last_artifact.artifact_update.artifact.metadata["citations"]
    assert "ALPHA-7" in citations[0]["text"]
    final = responses[-1]
    assert final.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    task_id = final.status_update.task_id
    task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    listed = await client.list_tasks(ListTasksRequest())
    assert task_id in [t.id for t in listed.tasks]
    await client.close()


async def test_a_message_without_streaming_returns_the_finished_task(
    server: ThreadServer,
) -> None:
    client = await a2a_client(server, "key-bob", streaming=False)
    responses = [r async for r in client.send_message(request("投影仪保修多久？"))]
    assert len(responses) == 1 and responses[0].task.status.state == TaskState.TASK_STATE_COMPLETED
    answer = answer_of(responses)
    assert "OMEGA-9" in answer and "ALPHA-7" not in answer  # bob is tenant t2
    await client.close()


async def test_another_users_task_is_not_found(server: ThreadServer) -> None:
    alice = await a2a_client(server, "key-alice", streaming=False)
    carol = await a2a_client(server, "key-carol", streaming=False)  # same tenant, other user
    responses = [r async for r in alice.send_message(request("保修"))]
    task_id = responses[0].task.id
    with pytest.raises(TaskNotFoundError):
        await carol.get_task(GetTaskRequest(id=task_id))
    with pytest.raises(TaskNotFoundError):
        await carol.cancel_task(CancelTaskRequest(id=task_id))
    assert task_id not in [t.id for t in (await carol.list_tasks(ListTasksRequest())).tasks]
    await alice.close()
    await carol.close()


async def test_a_call_without_a_key_is_401(server: ThreadServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as h:
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        response = await h.post("/a2a/shelfhand", json=body, headers={"A2A-Version": "1.0"})
    assert response.status_code == 401


async def test_a_long_run_is_a_task_to_poll_and_cancel(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    entered = threading.Event()
    release = threading.Event()
    server = serve(tmp_path, held_model(entered, release, "late"), thread_servers)
    client = await a2a_client(server, "key-alice", streaming=False, polling=True)
    try:
        responses = [r async for r in client.send_message(request("慢慢来"))]
        task = responses[0].task
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
        assert await asyncio.to_thread(entered.wait, 20)
        polled = await client.get_task(GetTaskRequest(id=task.id))
        assert polled.status.state == TaskState.TASK_STATE_WORKING
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        # the turn was stopped: the session is free for the next message of the context
        again = await a2a_client(server, "key-alice", streaming=False)
        release.set()
        follow = [
            r async for r in again.send_message(request("还在吗", context_id=task.context_id))
        ]
        assert follow[0].task.status.state == TaskState.TASK_STATE_COMPLETED
        await again.close()
    finally:
        release.set()
        await client.close()


async def test_two_tenants_sending_at_once_each_get_only_their_own_passages(
    server: ThreadServer,
) -> None:
    alice = await a2a_client(server, "key-alice")
    bob = await a2a_client(server, "key-bob")

    async def ask(client: Any) -> str:
        return answer_of([r async for r in client.send_message(request("投影仪保修多久？"))])

    for_alice, for_bob = await asyncio.gather(ask(alice), ask(bob))
    assert "ALPHA-7" in for_alice and "OMEGA-9" not in for_alice
    assert "OMEGA-9" in for_bob and "ALPHA-7" not in for_bob
    await alice.close()
    await bob.close()


async def test_each_subagent_is_an_a2a_agent_of_its_own(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "troubleshooter.md").write_text(
        "---\ndescription: 故障代码专家。\n---\nYou are TROUBLESHOOTER.\n", encoding="utf-8"
    )

    def who(messages: list[ShelfMessage], tools: Any) -> str:
        system = " ".join(m.text for m in messages if m.role == "system")
        return "专家" if "TROUBLESHOOTER" in system else "主管"

    server = serve(tmp_path, FunctionModel(who), thread_servers)
    base = server.url + "/a2a/shelfhand/troubleshooter"
    async with httpx.AsyncClient() as h:
        card = (await h.get(base + "/.well-known/agent-card.json")).json()
        assert card["name"] == "shelfhand/troubleshooter"
        assert card["description"] == "故障代码专家。"
        assert card["supportedInterfaces"][0]["url"] == base
        unauthenticated = await h.post(
            base, json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}
        )
        assert unauthenticated.status_code == 401
    http = httpx.AsyncClient(headers={"Authorization": "Bearer key-alice"}, timeout=30)
    client = await create_client(base, client_config=ClientConfig(httpx_client=http))
    assert answer_of([r async for r in client.send_message(request("E-203？"))]) == "专家"
    main = await a2a_client(server, "key-alice")
    assert answer_of([r async for r in main.send_message(request("你好"))]) == "主管"
    await client.close()
    await main.close()


def artifact_texts(responses: list[StreamResponse]) -> dict[str, str]:
    """Each artifact's text as a client that follows the protocol keeps it: a chunk with
    ``append`` adds to the artifact of its id, one without replaces it."""
    kept: dict[str, str] = {}
    for r in responses:
        if r.HasField("artifact_update"):
            update = r.artifact_update
            chunk = "".join(p.text for p in update.artifact.parts)
            before = kept.get(update.artifact.artifact_id, "") if update.append else ""
            kept[update.artifact.artifact_id] = before + chunk
        if r.HasField("task"):
            for artifact in r.task.artifacts:
                kept[artifact.artifact_id] = "".join(p.text for p in artifact.parts)
    return kept


async def test_an_answer_the_check_replaces_is_replaced_in_the_artifact(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    """The passage says 12 months; the model says 36, citing it. A streaming client is shown
    the 36 as it streams, then the artifact is replaced with the checked answer alone, the
    check's notice in its metadata; a blocking caller's task holds the checked answer alone.
    Before, the artifact only appended: it kept the 36 and the notice, the checked answer
    after them."""
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "投影仪保修"}), text("保修 36 个月 [1]。")] * 2
    )
    server = with_documents(serve(tmp_path, model, thread_servers), tmp_path)
    client = await a2a_client(server, "key-alice")
    responses = [r async for r in client.send_message(request("投影仪保修多久？"))]
    updates = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    *chunks, last = updates
    assert "36 个月" in "".join(p.text for u in chunks for p in u.artifact.parts)  # as it streamed
    assert last.last_chunk and not last.append  # replaces the artifact
    assert "已被替换" in last.artifact.metadata["notice"]
    (final,) = artifact_texts(responses).values()
    assert "12 个月" in final and "36" not in final and "已被替换" not in final
    await client.close()

    async with httpx.AsyncClient(headers={"Authorization": "Bearer key-alice"}) as h:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "role": "ROLE_USER",
                    "messageId": uuid.uuid4().hex,
                    "parts": [{"text": "投影仪保修多久？"}],
                },
                "configuration": {"blocking": True},
            },
        }
        headers = {"A2A-Version": "1.0"}
        r = await h.post(server.url + "/a2a/shelfhand", json=body, headers=headers, timeout=30)
    (artifact,) = r.json()["result"]["task"]["artifacts"]
    blocking = "".join(p["text"] for p in artifact["parts"])
    assert "12 个月" in blocking and "36" not in blocking and "已被替换" not in blocking
