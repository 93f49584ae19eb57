"""A chat model that is down (nothing listens on its port) or cuts its stream: once the turn's
passages were found, the service answers with their best sentences, marked with the model's
failure, instead of a bare 502; without passages, a 502 whose message reads cleanly. The real
openai SDK against a closed loopback port and a loopback server that cuts its stream."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import ALICE, BOB, ThreadServer, parse_sse, start_thread_server, user_contexts

from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.testing import hashing_router
from support.misbehaving_chat_server import FakeModelServer

DOC = "# 故障代码\n\n## E-203\n\nE-203：灯泡过热。请关机冷却 30 分钟，并清理防尘网。\n"
QUESTION = "E-203 要冷却多久？"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(tmp_path: Path, base_url: str, retrieval: str = "both") -> ThreadServer:
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": retrieval}
    model = OpenAIChatModel("local", base_url=base_url, api_key="k", max_retries=0)
    app = App(settings=Settings.load(tmp_path, env=env), model=model, router=hashing_router())
    server = start_thread_server(create_app(app, api_keys=user_contexts()))
    for who in (ALICE, BOB):
        with httpx.Client(base_url=server.url, headers=who, timeout=30) as c:
            files = [("files", ("troubleshooting.md", DOC.encode()))]
            assert c.post("/v1/knowledge/files", files=files).status_code == 200
    return server


@pytest.fixture
def dead(tmp_path: Path) -> Iterator[ThreadServer]:
    server = serve(tmp_path, f"http://127.0.0.1:{closed_port()}/v1")
    yield server
    server.stop()


def post(server: ThreadServer, who: dict[str, str], content: str, *, stream: bool) -> Any:
    with httpx.Client(base_url=server.url, headers=who, timeout=60) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": content, "stream": stream})
        stored = c.get(f"/v1/sessions/{session}").json()
    return r, stored


def test_a_dead_model_after_retrieval_answers_with_the_passages_and_says_why(
    dead: ThreadServer,
) -> None:
    r, stored = post(dead, ALICE, QUESTION, stream=False)

    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["extractive"] and reply["fallback_reason"] == "model_error"
    assert reply["output"].startswith("摘自文档：") and "30 分钟" in reply["output"]
    assert reply["citations"][0]["source"] == "t1/troubleshooting.md"
    assert reply["error"].startswith("could not connect to model 'local'")
    assert ".." not in reply["error"]
    # the session keeps the question and the answer given, and stays usable
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]
    assert stored["state"] == "idle"


def test_the_stream_of_a_dead_model_ends_with_the_passages_answer(dead: ThreadServer) -> None:
    r, _ = post(dead, ALICE, QUESTION, stream=True)
    events = parse_sse(r.text)

    assert r.status_code == 200 and "error" not in {e["type"] for e in events}
    final = events[-1]
    assert final["type"] == "final" and final["fallback_reason"] == "model_error"
    assert "30 分钟" in final["output"] and final["grounding"]["grounded"]


def test_a_dead_model_with_nothing_found_is_a_502_with_one_full_stop(dead: ThreadServer) -> None:
    r, _ = post(dead, ALICE, "What is the weather in Paris today?", stream=False)

    assert r.status_code == 502
    message = r.json()["detail"]
    assert message.startswith("could not connect to model 'local'")
    assert ".." not in message and message.endswith("the server is running.")


def test_a_dead_model_before_any_retrieval_is_a_clean_502(tmp_path: Path) -> None:
    server = serve(tmp_path, f"http://127.0.0.1:{closed_port()}/v1", retrieval="tool")
    try:
        r, stored = post(server, ALICE, QUESTION, stream=False)
    finally:
        server.stop()

    assert r.status_code == 502 and ".." not in r.json()["detail"]
    assert stored["messages"] == [] and stored["state"] == "failed"


def test_two_tenants_on_a_dead_model_each_get_their_own_passages(dead: ThreadServer) -> None:
    replies: dict[str, dict[str, Any]] = {}
    ready = threading.Barrier(2)

    def ask(name: str, who: dict[str, str]) -> None:
        ready.wait(timeout=30)
        replies[name] = post(dead, who, QUESTION, stream=False)[0].json()

    threads = [threading.Thread(target=ask, args=(n, w)) for n, w in (("a", ALICE), ("b", BOB))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert {c["source"] for c in replies["a"]["citations"]} == {"t1/troubleshooting.md"}
    assert {c["source"] for c in replies["b"]["citations"]} == {"t2/troubleshooting.md"}


def test_a_stream_cut_mid_answer_is_replaced_by_the_passages(tmp_path: Path) -> None:
    model_server = FakeModelServer()
    model_server.modes.append("cut")
    server = serve(tmp_path, model_server.url)
    try:
        r, _ = post(server, ALICE, QUESTION, stream=True)
    finally:
        server.stop()
        model_server.stop()
    events = parse_sse(r.text)
    replaced, final = events[-2], events[-1]

    assert "Hello, the answer is" in "".join(e["text"] for e in events if e["type"] == "text_delta")
    assert replaced["type"] == "answer_replaced" and replaced["reason"] == "model_error"
    assert final["output"] == replaced["output"] and "30 分钟" in final["output"]
    assert "cut off" in final["error"]


def test_a_follow_up_on_a_dead_model_is_answered_as_its_search_read_it(tmp_path: Path) -> None:
    # the model is down for both turns: the first is answered by the passages and kept, so
    # "它的光源能用多久？" is searched with the question it follows, and answered from that
    # search as it read it: the X1 Pro's row, not the warranty's sentence about light
    # sources ("光源 … 保修 6 个月或累计使用 1000 小时")
    from shelfhand.knowledge.base import sample_corpus

    server = serve(tmp_path, f"http://127.0.0.1:{closed_port()}/v1")
    samples = sample_corpus()
    try:
        with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
            files = [
                ("files", (name, (samples / name).read_bytes()))
                for name in ("product-specs.docx", "warranty-policy-v2.md")
            ]
            assert c.post("/v1/knowledge/files", files=files).status_code == 200
            session = c.post("/v1/sessions").json()["id"]
            url = f"/v1/sessions/{session}/messages"
            first = c.post(url, json={"content": "Lumen X1 Pro 多少钱？", "stream": False})
            second = c.post(url, json={"content": "它的光源能用多久？", "stream": False})
    finally:
        server.stop()

    assert first.status_code == 200 and "5,999" in first.json()["output"], first.text
    reply = second.json()
    assert second.status_code == 200 and reply["fallback_reason"] == "model_error", second.text
    assert "Laser, 20,000 h" in reply["output"] and "1000 小时" not in reply["output"], reply
