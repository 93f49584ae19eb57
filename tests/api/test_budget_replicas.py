"""Budgets across two full service replicas sharing Redis, or PostgreSQL alone: 20
concurrent turns split across both against a tenant budget of 5 turns' worth of tokens.
Each replica has its own workspace (its own knowledge); only Redis (or PostgreSQL) is
shared, so only a shared budget book can hold the line: 5 turns are answered, 15 get 429
naming the budget, and the tokens counted never pass the budget."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from service_helpers import ALICE, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.testing import FunctionModel, hashing_router
from shelfhand.usage.budgets import period_key
from support.budgets import full_window_model

WINDOW = 4096
BUDGET = 5 * WINDOW


def replica(folder: Path, model: FunctionModel, shared: dict[str, str]) -> ThreadServer:
    """One service replica over its own workspace, counting budgets in what ``shared``
    (settings) names: Redis, or PostgreSQL."""
    folder.mkdir()
    (folder / "shelfhand.toml").write_text(
        f"[budgets.tenant]\ntokens_per_day = {BUDGET}\n", encoding="utf-8"
    )
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool", **shared}
    app = App(settings=Settings.load(folder, env=env), model=model, router=hashing_router())
    return start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))


@pytest.mark.parametrize("shared", ["redis", "postgresql"])
def test_twenty_turns_on_two_replicas_never_pass_a_shared_budget_of_five(
    tmp_path: Path, shared: str, request: pytest.FixtureRequest, thread_servers: list[ThreadServer]
) -> None:
    if shared == "redis":
        settings = {"SHELFHAND_REDIS_URL": request.getfixturevalue("redis_url")}
    else:  # (no Redis: the counters in PostgreSQL)
        settings = {"SHELFHAND_DATABASE_URL": request.getfixturevalue("pg_url")}
    entered: list[int] = []  # the five admitted turns run together
    model = full_window_model(WINDOW, entered)
    replicas = [replica(tmp_path / name, model, settings) for name in ("a", "b")]
    thread_servers.extend(replicas)

    def sessions_on(server: ThreadServer, n: int) -> list[tuple[str, str]]:
        with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
            return [(server.url, c.post("/v1/sessions").json()["id"]) for _ in range(n)]

    turns = [t for pair in zip(*(sessions_on(r, 10) for r in replicas), strict=True) for t in pair]

    def send(turn: tuple[str, str]) -> tuple[str, httpx.Response]:
        url, session = turn
        with httpx.Client(base_url=url, headers=ALICE, timeout=30) as c:
            reply = c.post(
                f"/v1/sessions/{session}/messages", json={"content": "你好", "stream": False}
            )
        return url, reply

    with ThreadPoolExecutor(20) as pool:
        replies = list(pool.map(send, turns))

    answered = [(u, r) for u, r in replies if r.status_code == 200]
    refused = [(u, r) for u, r in replies if r.status_code == 429]
    assert (len(answered), len(refused), len(entered)) == (5, 15, 5)
    assert {u for u, _ in refused} == {r.url for r in replicas}  # both replicas refused
    for _, reply in refused:
        body = reply.json()
        assert body["code"] == "budget_exceeded"
        assert body["budget"]["budget"] == "tokens_per_day"
        assert body["budget"]["scope"] == "tenant t1"
        assert body["budget"]["limit"] == BUDGET
        assert 1 <= int(reply.headers["Retry-After"]) <= 86400
    # what the book holds after every turn settled: exactly the five answered turns' tokens
    day, _ = period_key("day", time.time())
    book = replicas[0].service.chat.budgets.book
    assert book.used(f"tenant:t1:tokens_per_day:{day}") == 5 * WINDOW
