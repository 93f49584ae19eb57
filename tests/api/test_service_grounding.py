"""The grounding check over HTTP: the reply carries it per sentence, an answer that cannot be
trusted comes back as the passages' own sentences (marked), and two tenants asking at once
each get the check of their own answer."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import (
    ALICE,
    BOB,
    ThreadServer,
    ask_turn,
    parse_sse,
    start_thread_server,
    user_contexts,
)

from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.testing import FunctionModel, hashing_router, text

DOCS = {
    "troubleshooting.md": "# 故障代码\n\n## E-203\n\nE-203：灯泡过热。请关机冷却 30 分钟，并清理防尘网。\n",
    "warranty.md": "# Warranty\n\nThe projector lamp is covered for 2 years or 3000 hours.\n",
}
ANSWERS = {
    "E-203 是什么故障？": "E-203 表示灯泡过热，请关机冷却 30 分钟 [1]。",
    "E-203 要冷却多久？": "E-203 出现时请关机冷却 90 分钟 [1]。",
}


def answer(messages: list[Message], tools: list[Any]) -> Any:
    question = messages[-1].text.rsplit("Question: ", 1)[-1]
    return text(ANSWERS[question])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadServer]:
    settings = Settings.load(tmp_path, env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, model=FunctionModel(answer), router=hashing_router())
    running = start_thread_server(create_app(app, api_keys=user_contexts()))
    for who in (ALICE, BOB):  # each tenant uploads the same documents
        with httpx.Client(base_url=running.url, headers=who, timeout=30) as c:
            files = [("files", (name, body.encode())) for name, body in DOCS.items()]
            assert c.post("/v1/knowledge/files", files=files).status_code == 200
    yield running
    running.stop()


def ask(server: ThreadServer, who: dict[str, str], question: str) -> dict[str, Any]:
    return ask_turn(server.url, who, question)


def test_a_grounded_reply_carries_its_check_per_sentence(server: ThreadServer) -> None:
    reply = ask(server, ALICE, "E-203 是什么故障？")

    assert reply["output"] == ANSWERS["E-203 是什么故障？"] and not reply["extractive"]
    assert reply["grounding"]["grounded"] is True
    sentence = reply["grounding"]["sentences"][0]
    assert sentence["supported"] and sentence["passage"] == 1


def test_a_reply_with_a_number_not_in_the_passages_comes_back_extractive(
    server: ThreadServer,
) -> None:
    reply = ask(server, ALICE, "E-203 要冷却多久？")

    assert reply["extractive"] and reply["fallback_reason"] == "ungrounded"
    assert reply["output"].startswith("摘自文档：") and "30 分钟" in reply["output"]
    assert "90" not in reply["output"]


def test_the_stream_ends_with_the_checked_answer(server: ThreadServer) -> None:
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "E-203 要冷却多久？"})
    events = parse_sse(r.text)
    replaced, final = events[-2], events[-1]

    assert final["type"] == "final" and final["extractive"] is True
    assert "30 分钟" in final["output"] and final["grounding"]["grounded"] is True
    # a client that concatenates the deltas learns they were replaced, and by what
    assert replaced["_event"] == replaced["type"] == "answer_replaced"
    assert replaced["reason"] == "ungrounded" and replaced["output"] == final["output"]
    assert replaced["notice"].startswith("上面的回答经与文档核对后已被替换")  # a Chinese question
    assert "90" in "".join(e["text"] for e in events if e["type"] == "text_delta")


def test_a_stream_whose_answer_stands_has_no_replaced_event(server: ThreadServer) -> None:
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "E-203 是什么故障？"})
    events = parse_sse(r.text)

    assert events[-1]["type"] == "final" and not events[-1]["extractive"]
    assert "answer_replaced" not in {e["type"] for e in events}


def test_two_tenants_asking_at_once_each_get_the_check_of_their_own_answer(
    server: ThreadServer,
) -> None:
    replies: dict[str, dict[str, Any]] = {}
    ready = threading.Barrier(2)

    def run(name: str, who: dict[str, str], question: str) -> None:
        ready.wait(timeout=30)
        replies[name] = ask(server, who, question)

    threads = [
        threading.Thread(target=run, args=("alice", ALICE, "E-203 是什么故障？")),
        threading.Thread(target=run, args=("bob", BOB, "E-203 要冷却多久？")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert not replies["alice"]["extractive"] and replies["alice"]["grounding"]["grounded"]
    assert replies["bob"]["extractive"] and "90" not in replies["bob"]["output"]
    assert {c["source"].split("/")[0] for c in replies["bob"]["citations"]} == {"t2"}
