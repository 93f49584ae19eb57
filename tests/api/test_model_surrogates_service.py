"""A turn whose model server sends half of a surrogate pair alone, in its text and in a tool
call's arguments (JSON ``\\ud800`` escapes: valid JSON, but no text). Before, the session
store failed on the answer ("surrogates not allowed"), the turn failed, and the stream's
encoder raised after the first event: the client read a body cut short. Now the turn answers,
with U+FFFD in the half's place, and the session and the audit keep it. The real openai SDK
against a loopback chat server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import ALICE, ThreadServer, parse_sse, start_thread_server, user_contexts

from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.testing import ScriptedModel, hashing_router, text
from support.chat_server import ChatServer, Reply, chunk

DOC = "# 故障代码\n\n## E-203\n\nE-203：灯泡过热。请关机冷却 30 分钟。\n"


def replies() -> list[Reply]:
    """A search for "E-203 \\ud800", then an answer holding "\\udc80" (the service streams
    from the model whether or not its caller streams)."""
    arguments = '{"query": "E-203 \ud800"}'
    call = {"index": 0, "id": "c1", "type": "function"}
    call["function"] = {"name": "retrieve", "arguments": arguments}
    answer = "E-203：冷却 30 分钟 \udc80 [1]。"
    return [
        Reply(sse=[chunk({"tool_calls": [call]}), chunk({}, "tool_calls")], ascii=True),
        Reply(sse=[chunk({"content": answer}), chunk({}, "stop")], ascii=True),
    ]


@pytest.fixture
def served(tmp_path: Path, thread_servers: list[ThreadServer]) -> tuple[ThreadServer, ChatServer]:
    chat = ChatServer()
    chat.start()
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    model = OpenAIChatModel("local", base_url=chat.url, api_key="k", max_retries=0)
    app = App(settings=Settings.load(tmp_path, env=env), model=model, router=hashing_router())
    server = start_thread_server(create_app(app, api_keys=user_contexts()))
    thread_servers.append(server)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        files = [("files", ("troubleshooting.md", DOC.encode()))]
        assert c.post("/v1/knowledge/files", files=files).status_code == 200
    yield server, chat
    chat.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_the_turn_answers_and_keeps_the_answer_with_the_replacement_character(
    served: tuple[ThreadServer, ChatServer], stream: bool
) -> None:
    server, chat = served
    chat.add(*replies())
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(
            f"/v1/sessions/{session}/messages", json={"content": "E-203？", "stream": stream}
        )
        stored = c.get(f"/v1/sessions/{session}").json()

    assert r.status_code == 200, ascii(r.text)
    if stream:
        events = parse_sse(r.text)
        assert [e["_event"] for e in events][-1] == "final"
        final: dict[str, Any] = events[-1]
        assert [e for e in events if e["_event"] == "error"] == []
    else:
        final = r.json()
    assert "30 分钟 \ufffd" in final["output"], ascii(final["output"])
    assert final["citations"][0]["source"] == "t1/troubleshooting.md"
    assert [m["role"] for m in stored["messages"]][-1] == "assistant"
    assert stored["state"] == "idle"
    audit = server.service.toolkit.audit_log
    assert audit is not None
    audit.flush()
    (record,) = audit.query(tool="retrieve")
    assert record.outcome == "ok"
    assert "E-203 \ufffd" in record.arguments, ascii(record.arguments)


@pytest.mark.parametrize("stream", [False, True])
def test_a_custom_models_lone_half_is_kept_as_the_replacement_character(
    tmp_path: Path, thread_servers: list[ThreadServer], stream: bool
) -> None:
    """A custom ChatModel (no adapter cleans its text): before, the session store failed on
    the answer, the turn answered 500 and the question was lost too."""
    model = ScriptedModel([text("保修 \udc80 两年。")])
    env = {"SHELFHAND_EMBEDDER": "hashing"}
    app = App(settings=Settings.load(tmp_path, env=env), model=model, router=hashing_router())
    server = start_thread_server(create_app(app, api_keys=user_contexts()))
    thread_servers.append(server)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "保修？", "stream": stream})
        stored = c.get(f"/v1/sessions/{session}").json()
    assert r.status_code == 200, ascii(r.text)
    final = parse_sse(r.text)[-1] if stream else r.json()
    assert ascii(final["output"]) == ascii("保修 \ufffd 两年。")
    roles = [m["role"] for m in stored["messages"]]
    assert (roles[0], roles[-1]) == ("user", "assistant")
