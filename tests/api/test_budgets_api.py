"""Budgets through the service: 20 concurrent turns against a tenant budget of 5 turns'
worth of tokens; 5 are answered, 15 get 429 naming the budget, its reset time and
``Retry-After``; the audit log and the traces record the refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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
from shelfhand.core.offload import STATE_THREADS
from shelfhand.core.results import Usage
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.models.base import ModelResponse
from shelfhand.testing import FunctionModel, text, tool_call
from support.budgets import full_window_model

WINDOW = 4096


def budgeted_server(
    workspace: Path, answer: Any, servers: list[ThreadServer], *, retrieval: str = "tool"
) -> ThreadServer:
    """The service over ``workspace`` (its shelfhand.toml holds the budgets) with a model
    answering by ``answer`` (or that model) in a context window of :data:`WINDOW` tokens;
    ``retrieval``: the setting ``answer_retrieval``."""
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": retrieval}
    model = answer if isinstance(answer, FunctionModel) else FunctionModel(answer)
    model.context_tokens = WINDOW  # type: ignore[attr-defined]  # as a configured model has
    app = App(
        settings=Settings.load(workspace, env=env),
        model=model,
        router=EmbeddingRouter({"any": HashingEmbedder()}),
    )
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    servers.append(server)
    return server


def test_twenty_concurrent_turns_against_five_turns_of_budget(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        f"[budgets.tenant]\ntokens_per_day = {5 * WINDOW}\n", encoding="utf-8"
    )
    entered: list[int] = []  # the five admitted turns run together
    server = budgeted_server(tmp_path, full_window_model(WINDOW, entered), thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        sessions = [c.post("/v1/sessions").json()["id"] for _ in range(20)]

        def send(session: str) -> httpx.Response:
            return c.post(
                f"/v1/sessions/{session}/messages", json={"content": "你好", "stream": True}
            )

        with ThreadPoolExecutor(20) as pool:
            replies = list(pool.map(send, sessions))
    answered = [r for r in replies if r.status_code == 200]
    refused = [r for r in replies if r.status_code == 429]
    assert (len(answered), len(refused), len(entered)) == (5, 15, 5)
    body = refused[0].json()
    assert body["code"] == "budget_exceeded"
    assert body["budget"]["budget"] == "tokens_per_day"
    assert body["budget"]["scope"] == "tenant t1"
    assert body["budget"]["limit"] == 5 * WINDOW
    assert body["budget"]["reset_at"] > 0
    assert 1 <= int(refused[0].headers["Retry-After"]) <= 86400

    audit = server.service.toolkit._gov.audit
    audit.flush()
    records = audit.query(tool="(model)")
    assert len(records) == 15 and {r.outcome for r in records} == {"budget_exceeded"}
    trace = httpx.get(
        f"{server.url}/v1/traces/{refused[0].headers['X-Trace-Id']}", headers=ALICE, timeout=30
    ).json()
    (turn,) = [s for s in trace["spans"] if s["name"] == "turn"]
    assert turn["status"] == "error"
    assert turn["attributes"]["error.type"] == "budget_exceeded"
    assert [e["name"] for e in turn["events"]] == ["budget.exceeded"]


def test_the_openai_endpoint_answers_a_spent_budget_with_429_and_its_reset(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        f"[budgets.tenant]\ntokens_per_day = {WINDOW}\n", encoding="utf-8"
    )

    async def answer(messages: list[Message], tools: Sequence[Any]) -> ModelResponse:
        return ModelResponse(
            message=Message.assistant("好的。"),
            usage=Usage(input_tokens=WINDOW - 100, output_tokens=100),
        )

    server = budgeted_server(tmp_path, answer, thread_servers)
    ask = {"model": "shelfhand", "messages": [{"role": "user", "content": "你好"}]}
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        first = c.post("/v1/chat/completions", json=ask)
        assert first.status_code == 200, first.text
        for stream in (False, True):
            spent = c.post("/v1/chat/completions", json={**ask, "stream": stream})
            assert spent.status_code == 429
            assert spent.json()["error"]["code"] == "budget_exceeded"
            assert spent.json()["error"]["type"] == "rate_limit_error"
            assert 60 < int(spent.headers["Retry-After"]) <= 86400  # the day's reset, not 1 s


DOCS = {
    "troubleshooting.md": "# 故障代码\n\n## E-203\n\nE-203：灯泡过热。请关机冷却 30 分钟，并清理防尘网。\n",
    "warranty.md": "# Warranty\n\nThe projector lamp is covered for 2 years or 3000 hours.\n",
}


def search_then_answer(messages: list[Message], tools: Sequence[Any]) -> Any:
    """Searches for the question first; answers once passages came back (a call the
    budget refuses in these tests)."""
    if not any(m.role == "tool" for m in messages):
        return tool_call("retrieve", {"query": messages[-1].text})
    return text("never asked")


def one_call_a_day(tmp_path: Path, servers: list[ThreadServer]) -> ThreadServer:
    """Every user may make one model call a day; both tenants hold the documents."""
    (tmp_path / "shelfhand.toml").write_text(
        "[budgets.user]\nmodel_calls_per_day = 1\n", encoding="utf-8"
    )
    server = budgeted_server(tmp_path, search_then_answer, servers)
    for who in (ALICE, BOB):
        with httpx.Client(base_url=server.url, headers=who, timeout=30) as c:
            files = [("files", (name, body.encode())) for name, body in DOCS.items()]
            assert c.post("/v1/knowledge/files", files=files).status_code == 200
    return server


def turn(server: ThreadServer, who: dict[str, str], question: str) -> httpx.Response:
    with httpx.Client(base_url=server.url, headers=who, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        return c.post(
            f"/v1/sessions/{session}/messages", json={"content": question, "stream": False}
        )


def test_a_budget_spent_mid_turn_answers_each_tenant_from_its_passages_at_once(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = one_call_a_day(tmp_path, thread_servers)
    asks = [(ALICE, "E-203 是什么故障？"), (BOB, "How long is the lamp covered?")]
    with ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(lambda a: turn(server, *a), asks))

    for reply, (lead, expected, scope) in zip(
        replies,
        [
            ("摘自文档：", "灯泡过热", "user t1/alice"),
            ("From the documents:", "2 years", "user t2/bob"),
        ],
        strict=True,
    ):
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["stop_reason"] == "budget_exceeded"
        assert body["fallback_reason"] == "budget_exceeded" and body["extractive"]
        assert body["output"].startswith(lead) and expected in body["output"]
        assert body["budget"]["budget"] == "model_calls_per_day"
        assert body["budget"]["scope"] == scope and body["budget"]["limit"] == 1
        assert body["usage"]["model_calls"] == 1 and body["usage"]["retrievals"] == 1

    audit = server.service.toolkit._gov.audit
    audit.flush()
    records = audit.query(tool="(model)")
    assert sorted((r.tenant, r.outcome) for r in records) == [
        ("t1", "budget_exceeded"),
        ("t2", "budget_exceeded"),
    ]
    trace = httpx.get(
        f"{server.url}/v1/traces/{replies[0].json()['trace_id']}", headers=ALICE, timeout=30
    ).json()
    (root,) = [s for s in trace["spans"] if s["name"] == "turn"]
    assert root["status"] != "error"  # answered, not failed
    assert root["attributes"]["shelfhand.turn.stop_reason"] == "budget_exceeded"
    assert [e["name"] for e in root["events"]] == ["budget.exceeded"]
    assert root["events"][0]["attributes"]["budget"] == "model_calls_per_day"
    (agent,) = [s for s in trace["spans"] if s["name"].startswith("invoke_agent")]
    assert [e["name"] for e in agent["events"]] == ["budget.exceeded"]

    again = turn(server, ALICE, "E-203 是什么故障？")  # no model call left: refused at once
    assert again.status_code == 429 and again.json()["budget"]["scope"] == "user t1/alice"


def test_the_stream_and_the_openai_endpoint_end_a_spent_budget_with_the_passages(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = one_call_a_day(tmp_path, thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        streamed = c.post(
            f"/v1/sessions/{session}/messages",
            json={"content": "E-203 是什么故障？", "stream": True},
        )
    assert streamed.status_code == 200
    events = parse_sse(streamed.text)
    (final,) = [e for e in events if e["type"] == "final"]
    deltas = "".join(e["text"] for e in events if e["type"] == "text_delta")
    assert deltas == final["output"] and "灯泡过热" in final["output"]
    assert final["fallback_reason"] == "budget_exceeded"
    assert final["budget"]["scope"] == "user t1/alice"
    assert final["usage"]["model_calls"] == 1

    ask = {"model": "shelfhand", "messages": [{"role": "user", "content": "E-203 是什么故障？"}]}
    with httpx.Client(base_url=server.url, headers=CAROL, timeout=30) as c:
        reply = c.post("/v1/chat/completions", json=ask)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    message = body["choices"][0]["message"]
    assert "灯泡过热" in message["content"]
    assert message["shelfhand"]["fallback_reason"] == "budget_exceeded"
    assert message["shelfhand"]["budget"]["scope"] == "user t1/carol"
    assert body["usage"]["completion_tokens"] > 0


def test_each_caller_sees_where_their_budgets_stand_in_their_usage(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    """Two tenants' turns at once; then each caller's ``GET /v1/usage`` says what is left of
    their tenant's budget and their own, and no one else's."""
    (tmp_path / "shelfhand.toml").write_text(
        f"[budgets.tenant]\ntokens_per_day = {10 * WINDOW}\n\n"
        "[budgets.user]\nmodel_calls_per_day = 5\n",
        encoding="utf-8",
    )
    used = Usage(input_tokens=300, output_tokens=20)

    def answer(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        return ModelResponse(message=Message.assistant("你好！"), usage=used)

    server = budgeted_server(tmp_path, answer, thread_servers)

    def turn(who: dict[str, str]) -> int:
        with httpx.Client(base_url=server.url, headers=who, timeout=30) as c:
            session = c.post("/v1/sessions").json()["id"]
            body = {"content": "你好", "stream": False}
            return c.post(f"/v1/sessions/{session}/messages", json=body).status_code

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(turn, [ALICE, BOB])) == [200, 200]

    def standing(who: dict[str, str]) -> dict[str, tuple[int, int]]:
        budgets = httpx.get(f"{server.url}/v1/usage", headers=who, timeout=30).json()["budgets"]
        assert all(b["remaining"] == b["limit"] - b["used"] and b["reset_at"] > 0 for b in budgets)
        return {f"{b['scope']}: {b['budget']}": (b["used"], b["limit"]) for b in budgets}

    spent = used.input_tokens + used.output_tokens
    assert standing(ALICE) == {
        "tenant t1: tokens_per_day": (spent, 10 * WINDOW),
        "user t1/alice: model_calls_per_day": (1, 5),
    }
    assert standing(BOB) == {
        "tenant t2: tokens_per_day": (spent, 10 * WINDOW),
        "user t2/bob: model_calls_per_day": (1, 5),
    }
    assert standing(CAROL) == {  # alice's tenant: its tokens, and none of carol's own calls
        "tenant t1: tokens_per_day": (spent, 10 * WINDOW),
        "user t1/carol: model_calls_per_day": (0, 5),
    }
    # the command line reads the same counters (the workspace's budgets.db)
    server.stop()
    out = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "usage", "--tenant", "t1", "--user", "alice",
         "--json"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SHELFHAND_WORKSPACE": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    budgets = json.loads(out.stdout)["budgets"]
    assert [(b["scope"], b["used"]) for b in budgets] == [
        ("tenant t1", spent),
        ("user t1/alice", 1),
    ]
    table = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "usage", "--tenant", "t1"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SHELFHAND_WORKSPACE": str(tmp_path)},
    ).stdout  # fmt: skip
    assert "tokens_per_day" in table and "model_calls_per_day" not in table  # the tenant's


def test_a_turn_waiting_on_a_locked_budgets_file_holds_up_no_other_request(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    """Another process holds ``budgets.db``'s write lock while a turn reserves its model call:
    the turn waits (up to SQLite's busy timeout), the service does not. Before, the counters
    were written on the event loop, and every other request (here ``/healthz``) waited with
    the turn: 3.6 s of 4 in a run by hand."""
    import sqlite3
    import threading
    import time

    (tmp_path / "shelfhand.toml").write_text(
        "[budgets.user]\ntokens_per_day = 1000000\n", encoding="utf-8"
    )
    server = budgeted_server(tmp_path, lambda messages, tools: "好的。", thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        c.post(f"/v1/sessions/{session}/messages", json={"content": "你好"})  # (the schema)
        holder = sqlite3.connect(tmp_path / "budgets.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process's write, held
        replies: list[httpx.Response] = []
        turn = threading.Thread(
            target=lambda: replies.append(
                c.post(f"/v1/sessions/{session}/messages", json={"content": "再来"})
            )
        )
        try:
            turn.start()
            time.sleep(0.5)  # the turn is waiting on the file's lock
            assert not replies
            health = httpx.get(f"{server.url}/healthz", timeout=2)  # (before: timed out)
            assert health.status_code == 200
            assert not replies  # the turn still waits
        finally:
            holder.execute("COMMIT")
            holder.close()
            turn.join(30)
    assert replies[0].status_code == 200, replies[0].text


def test_turns_waiting_on_their_budget_counters_do_not_hold_up_another_callers_turn(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    """Only alice's key has budgets. While another process holds ``budgets.db``'s write lock,
    more of alice's turns wait on it than the event loop's default executor has threads (cores
    + 4), and than the counters' own. Bob's turn, which has no budget to wait on, is answered
    meanwhile: its search runs on the default executor, which the counters' waits no longer
    take, and a caller without budgets does not wait for a counters' thread. Before, the
    counters were written on the default executor, and bob's turn waited behind alice's."""
    import os
    import sqlite3
    import threading
    import time

    (tmp_path / "shelfhand.toml").write_text(
        '[[api_keys]]\nkey = "key-alice"\ntenant = "t1"\nuser = "alice"\nroles = ["user"]\n'
        "budgets = { tokens_per_day = 1000000 }\n",
        encoding="utf-8",
    )
    server = budgeted_server(
        tmp_path, lambda messages, tools: "好的。", thread_servers, retrieval="context"
    )
    # more than either pool of threads holds
    waiting = max(min(32, (os.cpu_count() or 1) + 4), STATE_THREADS) + 2
    with (
        httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as alice,
        httpx.Client(base_url=server.url, headers=BOB, timeout=30) as bob,
    ):
        sessions = [alice.post("/v1/sessions").json()["id"] for _ in range(waiting)]
        alice.post(f"/v1/sessions/{sessions[0]}/messages", json={"content": "你好"})  # (schema)
        bobs = bob.post("/v1/sessions").json()["id"]
        holder = sqlite3.connect(tmp_path / "budgets.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process's write, held
        replies: list[httpx.Response] = []
        turns = [
            threading.Thread(
                target=lambda s=s: replies.append(
                    alice.post(f"/v1/sessions/{s}/messages", json={"content": "再来"})
                )
            )
            for s in sessions
        ]
        try:
            for turn in turns:
                turn.start()
            time.sleep(0.5)  # alice's turns wait on the file's lock
            assert not replies
            start = time.monotonic()
            answer = bob.post(f"/v1/sessions/{bobs}/messages", json={"content": "你好"}, timeout=2)
            assert answer.status_code == 200, answer.text  # (before: timed out)
            assert time.monotonic() - start < 2
            assert not replies  # alice's turns still wait
        finally:
            holder.execute("COMMIT")
            holder.close()
            for turn in turns:
                turn.join(30)
    assert [r.status_code for r in replies] == [200] * waiting
