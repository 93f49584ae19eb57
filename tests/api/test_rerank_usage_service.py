"""``rerank = "llm"`` through the service, two callers of two tenants at once: each search's
ranking call is in its own caller's reply, ledger row, trace and budget, never the other's
(the reranker runs every caller's call on one loop of its own, in another thread, so each
call must carry its caller's turn there), and ``/metrics`` counts it."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import ALICE, BOB, ThreadServer, parse_sse, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message, ToolCallBlock
from shelfhand.core.results import Usage
from shelfhand.core.settings import Settings
from shelfhand.models.base import ModelResponse
from shelfhand.testing import FunctionModel, hashing_router

ADMIN = {"Authorization": "Bearer key-admin"}
FILES = {
    "退货.md": "# 退货政策\n\n拆封后七天内可退货，需保留发票。",
    "保修.md": "# 保修政策\n\n整机保修一年，电池保修六个月。",
    "运费.md": "# 运费\n\n退货运费由买家承担，退货时发票随货寄回。",
}
RANKING = Usage(input_tokens=300, output_tokens=5)
SEARCH = Usage(input_tokens=100, output_tokens=10)
ANSWER = Usage(input_tokens=400, output_tokens=20)
PRICE = (0.8, 2.0)  # per million tokens, in and out


def cost(*usages: Usage) -> float:
    return sum(u.input_tokens * PRICE[0] + u.output_tokens * PRICE[1] for u in usages) / 1e6


ASKED: list[str] = []
"""Every request the model got, by kind (``rank``, ``search``, ``answer``)."""


def turn(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
    """The ranking prompt gets an order; a turn searches, then answers."""
    response = _turn(messages)
    ranks = "You rank search results" in messages[0].text
    ASKED.append("rank" if ranks else "search" if response.message.tool_calls else "answer")
    return response


def _turn(messages: Sequence[Message]) -> ModelResponse:
    if messages[0].role == "system" and "You rank search results" in messages[0].text:
        return ModelResponse(message=Message.assistant("[1, 2]"), usage=RANKING)
    last_question = max(i for i, m in enumerate(messages) if m.role == "user")
    if not any(r.name == "retrieve" for m in messages[last_question:] for r in m.tool_results):
        block = ToolCallBlock(id="c1", name="retrieve", arguments='{"query": "退货 发票"}')
        return ModelResponse(message=Message.assistant(tool_calls=[block]), usage=SEARCH)
    return ModelResponse(message=Message.assistant("拆封后七天内可退货 [1]。"), usage=ANSWER)


@pytest.fixture
def server(tmp_path: Path, thread_servers: list[ThreadServer]) -> ThreadServer:
    (tmp_path / "shelfhand.toml").write_text(
        f'[shelfhand.prices."qwen-plus"]\ninput = {PRICE[0]}\noutput = {PRICE[1]}\n\n'
        "[budgets.user]\nmodel_calls_per_day = 4\n",
        encoding="utf-8",
    )
    env = {
        "SHELFHAND_EMBEDDER": "hashing",
        "SHELFHAND_ANSWER_RETRIEVAL": "tool",
        "SHELFHAND_RERANK": "llm",
        "SHELFHAND_TRACING": "stored",
    }
    app = App(
        settings=Settings.load(tmp_path, env=env),
        model=FunctionModel(turn, name="qwen-plus"),
        router=hashing_router(),
    )
    keys = {
        **user_contexts(),
        "key-admin": UserContext(tenant_id="t1", user_id="ops", roles=["admin"]),
    }
    started = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=keys))
    thread_servers.append(started)
    return started


def ask(server: ThreadServer, who: dict[str, str], got: dict[str, Any]) -> None:
    with httpx.Client(base_url=server.url, headers=who, timeout=30) as c:
        files = [("files", (name, body.encode(), "text/markdown")) for name, body in FILES.items()]
        up = c.post("/v1/knowledge/files", files=files)
        assert up.status_code in (200, 201, 202), up.text
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "拆封后多久可以退货？"})
        assert r.status_code == 200, r.text
        (final,) = [e for e in parse_sse(r.text) if e["type"] == "final"]
        got[who["Authorization"]] = (r.headers["X-Trace-Id"], final, session)


def test_each_callers_ranking_is_in_their_own_reply_ledger_trace_and_budget(
    server: ThreadServer,
) -> None:
    got: dict[str, Any] = {}
    askers = [threading.Thread(target=ask, args=(server, who, got)) for who in (ALICE, BOB)]
    for t in askers:
        t.start()
    for t in askers:
        t.join(60)
    assert len(got) == 2
    whole = {"input_tokens": 800, "output_tokens": 35, "model_calls": 3}
    for who in (ALICE, BOB):
        trace_id, final, _ = got[who["Authorization"]]
        usage = final["usage"]
        assert {k: usage[k] for k in whole} == whole, usage  # the search, its ranking, the answer
        assert usage["cost"] == pytest.approx(cost(SEARCH, RANKING, ANSWER))
        assert final["citations"][0]["source"].endswith("退货.md")

        (row,) = httpx.get(f"{server.url}/v1/usage", headers=who).json()["usage"]
        assert {k: row[k] for k in whole} == whole, row
        assert row["cost"] == pytest.approx(cost(SEARCH, RANKING, ANSWER))

        spans = httpx.get(f"{server.url}/v1/traces/{trace_id}", headers=who).json()["spans"]
        chats = [s for s in spans if s["kind"] == "chat"]
        (search,) = [s for s in spans if s["kind"] == "retrieval"]
        assert len(chats) == 3
        (ranking,) = [s for s in chats if s["parent_id"] == search["span_id"]]
        assert ranking["attributes"]["gen_ai.usage.input_tokens"] == RANKING.input_tokens

    # the budget (4 calls a day each) holds the ranking: a second turn's search is made, its
    # ranking refused (the fused order kept), and the answer's call with it
    alice_session = got[ALICE["Authorization"]][2]
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        replied = c.post(
            f"/v1/sessions/{alice_session}/messages",
            json={"content": "需要发票吗？", "stream": False},
        )
        again = replied.json()
        spans = c.get(f"/v1/traces/{replied.headers['X-Trace-Id']}").json()["spans"]
    assert again["usage"]["model_calls"] == 1
    assert again["fallback_reason"] == "budget_exceeded"
    assert again["budget"]["budget"] == "model_calls_per_day"
    # both refusals are audited and traced: the ranking's (on the search's span), the answer's
    audit = server.service.toolkit._gov.audit
    audit.flush()
    refusals = audit.query(tool="(model)")
    assert [(r.user, r.outcome, "rerank" in r.arguments) for r in refusals] == [
        ("alice", "budget_exceeded", True),
        ("alice", "budget_exceeded", False),
    ]
    (search,) = [s for s in spans if s["kind"] == "retrieval"]
    (event,) = search["events"]
    assert (event["name"], event["attributes"]["shelfhand.side_call"]) == (
        "budget.exceeded",
        "rerank",
    )

    scraped = httpx.get(f"{server.url}/metrics", headers=ADMIN).text.splitlines()
    calls = [line for line in scraped if line.startswith("shelfhand_model_calls_total{")]
    assert calls == ['shelfhand_model_calls_total{model="qwen-plus",status="ok"} 7.0'], calls
    refusals = [line for line in scraped if line.startswith("shelfhand_budget_refusals_total{")]
    assert sorted(refusals) == [
        'shelfhand_budget_refusals_total{budget="model_calls_per_day",call="rerank"} 1.0',
        'shelfhand_budget_refusals_total{budget="model_calls_per_day",call="turn"} 1.0',
    ], refusals


def test_a_searchs_ranking_is_booked_counted_and_held_to_the_callers_budget(
    server: ThreadServer,
) -> None:
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        files = [("files", (name, body.encode(), "text/markdown")) for name, body in FILES.items()]
        assert c.post("/v1/knowledge/files", files=files).status_code in (200, 201, 202)
        for _ in range(5):  # the budget is 4 calls a day: the fifth search keeps fused order
            found = c.get("/v1/knowledge/search", params={"q": "退货 发票", "top_k": 2})
            assert found.status_code == 200, found.text
            assert len(found.json()["results"]) == 2
        (row,) = c.get("/v1/usage").json()["usage"]
    assert row["turns"] == 0
    assert row["model_calls"] == 4 and row["retrievals"] == 4
    assert row["input_tokens"] == 4 * RANKING.input_tokens
    assert row["cost"] == pytest.approx(4 * cost(RANKING))
    assert httpx.get(f"{server.url}/v1/usage", headers=BOB).json()["usage"] == []
    # the refused ranking is audited, with the request's trace id and what the call was for
    audit = server.service.toolkit._gov.audit
    audit.flush()
    (refusal,) = audit.query(tool="(model)")
    assert (refusal.outcome, refusal.user, refusal.trace_id) == (
        "budget_exceeded",
        "alice",
        found.headers["X-Trace-Id"],
    )
    assert "model_calls_per_day" in refusal.arguments and "rerank" in refusal.arguments

    scraped = httpx.get(f"{server.url}/metrics", headers=ADMIN).text.splitlines()
    calls = [line for line in scraped if line.startswith("shelfhand_model_calls_total{")]
    assert calls == ['shelfhand_model_calls_total{model="qwen-plus",status="ok"} 4.0'], calls
    assert 'shelfhand_retrieval_seconds_count{mode="hybrid"} 5.0' in scraped


def test_ten_turns_at_once_never_spend_past_the_budget_with_their_rankings(
    server: ThreadServer,
) -> None:
    """Each turn's ranking reserves from the reranker's own thread while other turns reserve
    from the service's loop: 10 turns of 3 calls at once against 4 calls a day. (The first
    turn is let reach its ranking before the other nine start: which calls win the budget's
    last places is otherwise a race that the rankings may lose, the reservations being
    written from worker threads.)"""
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        files = [("files", (name, body.encode(), "text/markdown")) for name, body in FILES.items()]
        assert c.post("/v1/knowledge/files", files=files).status_code in (200, 201, 202)

    def ask_once(i: int) -> int:
        deadline = time.monotonic() + 10
        while i and "rank" not in ASKED and time.monotonic() < deadline:
            time.sleep(0.005)
        with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
            session = c.post("/v1/sessions").json()["id"]
            r = c.post(f"/v1/sessions/{session}/messages", json={"content": "拆封后多久可以退货？"})
            return r.status_code

    ASKED.clear()
    with ThreadPoolExecutor(10) as pool:
        statuses = list(pool.map(ask_once, range(10)))
    # the model was asked 4 times in all, rankings included (before, rankings were free)
    assert len(ASKED) == 4 and "rank" in ASKED, ASKED
    assert set(statuses) <= {200, 429}, statuses
    (row,) = httpx.get(f"{server.url}/v1/usage", headers=ALICE).json()["usage"]
    assert row["model_calls"] <= 4, row
    scraped = httpx.get(f"{server.url}/metrics", headers=ADMIN).text.splitlines()
    (ok,) = [
        line
        for line in scraped
        if line.startswith('shelfhand_model_calls_total{model="qwen-plus",status="ok"}')
    ]
    assert float(ok.rsplit(" ", 1)[1]) <= 4, ok
