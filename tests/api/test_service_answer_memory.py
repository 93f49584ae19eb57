"""The conversation keeps the answer the user got: when the answer check replaces the model's
answer, the session's stored messages and the next turn's history hold the replacement, on
the SQLite session store and on PostgreSQL, and two tenants asking at once each keep their
own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import ALICE, BOB, ThreadServer, start_thread_server, user_contexts, write

from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.testing import FunctionModel, hashing_router, text

DOC = "# 故障代码\n\n## E-203\n\nE-203：灯泡过热。请关机冷却 30 分钟，并清理防尘网。\n"
WRONG = "E-203 出现时请关机冷却 90 分钟 [1]。"
RIGHT = "E-203 表示灯泡过热，请关机冷却 30 分钟 [1]。"


class Model:
    """Answers the first question of a session wrongly (a number no passage holds) and
    records what it is shown for every later one."""

    def __init__(self) -> None:
        self.seen: dict[str, list[Message]] = {}

    def __call__(self, messages: list[Message], tools: list[Any]) -> Any:
        question = messages[-1].text.rsplit("Question: ", 1)[-1]
        self.seen[question] = list(messages)
        if question.startswith("E-203 要冷却多久"):
            return text(WRONG)
        if question.startswith("E-203 是什么"):
            return text(RIGHT)
        return text("好的 [1]。")


@pytest.fixture(params=["sqlite", "pg"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ThreadServer, Model]]:
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_RETRIEVAL_MODE": "keyword"}
    if request.param == "pg":
        env["SHELFHAND_DATABASE_URL"] = request.getfixturevalue("pg_url")
    model = Model()
    app = App(
        settings=Settings.load(tmp_path / "ws", env=env),
        model=FunctionModel(model),
        router=hashing_router(),
    )
    server = start_thread_server(create_app(app, api_keys=user_contexts()))
    # each tenant its own copy (a source is one tenant's: ingested for another, it moves);
    # ingested in the process: the PostgreSQL service leaves uploads to workers
    for tenant in ("t1", "t2"):
        doc = write(tmp_path / f"docs-{tenant}" / "troubleshooting.md", DOC)
        server.service.kb.ingest([doc], tenant_id=tenant)
    yield server, model
    server.stop()


def two_turns(url: str, who: dict[str, str], first: str, then: str) -> tuple[str, dict[str, Any]]:
    """A session with two turns; its id and the first reply."""
    with httpx.Client(base_url=url, headers=who, timeout=60) as c:
        session = c.post("/v1/sessions").json()["id"]
        reply = c.post(f"/v1/sessions/{session}/messages", json={"content": first, "stream": False})
        assert reply.status_code == 200, reply.text
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": then, "stream": False})
        assert r.status_code == 200, r.text
    return session, reply.json()


def assistant_texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages if m.role == "assistant" and m.text]


def test_a_replaced_answer_is_what_the_session_keeps_and_the_next_turn_sees(
    served: tuple[ThreadServer, Model],
) -> None:
    server, model = served
    session, reply = two_turns(server.url, ALICE, "E-203 要冷却多久？", "还有别的办法吗？")

    assert reply["extractive"] and reply["fallback_reason"] == "ungrounded"
    history = assistant_texts(model.seen["还有别的办法吗？"])
    assert history == [reply["output"]] and "90" not in history[0]
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        stored = c.get(f"/v1/sessions/{session}").json()["messages"]
    answers = [m for m in stored if m["role"] == "assistant" and not m.get("tool_calls")]
    texts = [b["text"] for m in answers for b in m["content"] if b.get("type") == "text"]
    assert texts[0] == reply["output"] and all("90 分钟" not in t for t in texts)


def test_an_answer_the_check_keeps_is_remembered_as_the_model_wrote_it(
    served: tuple[ThreadServer, Model],
) -> None:
    server, model = served
    _, reply = two_turns(server.url, ALICE, "E-203 是什么故障？", "还有别的办法吗？")

    assert not reply["extractive"] and reply["output"] == RIGHT
    assert assistant_texts(model.seen["还有别的办法吗？"]) == [RIGHT]


def test_two_tenants_at_once_each_keep_their_own_answer(
    served: tuple[ThreadServer, Model],
) -> None:
    server, model = served
    replies: dict[str, dict[str, Any]] = {}
    ready = threading.Barrier(2)

    def run(who: dict[str, str], first: str, then: str) -> None:
        ready.wait(timeout=30)
        replies[then] = two_turns(server.url, who, first, then)[1]

    threads = [
        threading.Thread(target=run, args=(ALICE, "E-203 是什么故障？", "那 alice 呢？")),
        threading.Thread(target=run, args=(BOB, "E-203 要冷却多久？", "那 bob 呢？")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert assistant_texts(model.seen["那 alice 呢？"]) == [RIGHT]
    bob = assistant_texts(model.seen["那 bob 呢？"])
    assert bob == [replies["那 bob 呢？"]["output"]] and "90" not in bob[0]
