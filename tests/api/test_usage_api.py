"""The usage of a service turn: the reply and the ledger row hold every model call of the
turn, its subagents' included, and its cost at the configured prices."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import ALICE, BOB, ThreadServer, parse_sse, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.errors import ModelTimeoutError
from shelfhand.core.messages import Message, ToolCallBlock
from shelfhand.core.results import Usage
from shelfhand.core.settings import Settings
from shelfhand.models.base import ModelResponse
from shelfhand.testing import FunctionModel, hashing_router


def reply(message: Message, input_tokens: int, output_tokens: int) -> ModelResponse:
    return ModelResponse(
        message=message, usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    )


def call(name: str, arguments: str) -> Message:
    block = ToolCallBlock(id=f"c-{name}", name=name, arguments=arguments)
    return Message.assistant(tool_calls=[block])


RESEARCHER = """---
description: Works out sums with the calculator.
tools: [calculator]
---
You are the researcher.
"""


def test_the_services_reply_and_ledger_row_hold_the_turns_whole_usage(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    def turn(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        researcher = "You are the researcher" in messages[0].text
        if messages[-1].role == "tool":
            return reply(Message.assistant("42"), *((7, 2) if researcher else (50, 5)))
        if researcher:
            return reply(call("calculator", '{"expression": "6*7"}'), 6, 1)
        return reply(call("researcher", '{"task": "6 乘 7 是多少？"}'), 40, 4)

    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "researcher.md").write_text(RESEARCHER, encoding="utf-8")
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    settings = Settings.load(tmp_path, env=env)
    app = App(settings=settings, model=FunctionModel(turn), router=hashing_router())
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    thread_servers.append(server)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        body = c.post(
            f"/v1/sessions/{session}/messages", json={"content": "6 乘 7？", "stream": False}
        ).json()
        report = c.get("/v1/usage").json()
    # the supervisor's two calls (40+4, 50+5) and the researcher's (6+1, 7+2); the delegation
    # and the calculator
    whole = {"input_tokens": 103, "output_tokens": 12, "model_calls": 4, "tool_calls": 2}
    assert {k: body["usage"][k] for k in whole} == whole
    (row,) = report["usage"]
    assert {k: row[k] for k in whole} == whole


def test_the_cost_of_each_turn_reaches_the_reply_the_stream_the_ledger_and_the_cli(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand.prices."qwen-plus"]\ninput = 0.8\noutput = 2.0\n', encoding="utf-8"
    )

    def turn(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        return reply(Message.assistant("你好！"), 10_000, 1_000)

    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    model = FunctionModel(turn, name="qwen-plus")
    app = App(settings=Settings.load(tmp_path, env=env), model=model, router=hashing_router())
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    thread_servers.append(server)
    one = (10_000 * 0.8 + 1_000 * 2.0) / 1_000_000
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        body = c.post(
            f"/v1/sessions/{session}/messages", json={"content": "你好", "stream": False}
        ).json()
        assert body["usage"]["cost"] == pytest.approx(one)
        streamed = c.post(f"/v1/sessions/{session}/messages", json={"content": "再见"})
        (final,) = [e for e in parse_sse(streamed.text) if e["type"] == "final"]
        assert final["usage"]["cost"] == pytest.approx(one)
        (row,) = c.get("/v1/usage").json()["usage"]
    assert row["model"] == "qwen-plus" and row["turns"] == 2
    assert row["cost"] == pytest.approx(2 * one)
    server.stop()

    out = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "usage", "--tenant", "t1"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SHELFHAND_WORKSPACE": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    header, line = out.stdout.splitlines()[:2]
    assert header.split()[-1] == "cost" and line.split()[-1] == f"{2 * one:.6f}"


DOC = "# 故障代码\n\n## E-203\n\nE-203：灯泡过热。请关机冷却 30 分钟，并清理防尘网。\n"


@pytest.mark.parametrize("found", [True, False])
def test_a_turn_whose_model_fails_after_a_call_still_counts_that_call(
    tmp_path: Path, thread_servers: list[ThreadServer], found: bool
) -> None:
    # found: the first call searched, so the passages answer (extractive, usage in the
    # reply); else it used the calculator and the turn fails (504): the ledger counts it
    # either way
    def turn(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        if messages[-1].role == "tool":
            raise ModelTimeoutError("the model took too long")
        if found:
            return reply(call("retrieve", '{"query": "E-203 冷却"}'), 300, 20)
        return reply(call("calculator", '{"expression": "6*7"}'), 300, 20)

    env = {
        "SHELFHAND_EMBEDDER": "hashing",
        "SHELFHAND_ANSWER_RETRIEVAL": "tool",
        "SHELFHAND_BUILTIN_TOOLS": "calculator",
    }
    settings = Settings.load(tmp_path, env=env)
    app = App(settings=settings, model=FunctionModel(turn), router=hashing_router())
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    thread_servers.append(server)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        files = [("files", ("troubleshooting.md", DOC.encode()))]
        assert c.post("/v1/knowledge/files", files=files).status_code == 200
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(
            f"/v1/sessions/{session}/messages",
            json={"content": "E-203 要冷却多久？", "stream": False},
        )
        report = c.get("/v1/usage").json()
    # the call that ran is counted too (a search when it was retrieve), and the one past its
    # timeout at its request's estimate, as the budget charged it (before: not at all)
    (row,) = report["usage"]
    cut = row["input_tokens"] - 300
    assert 300 < cut < 5000, cut  # the system prompt, the tools, the question, the result
    spent = {
        "input_tokens": 300 + cut,
        "output_tokens": 20,
        "model_calls": 2,
        "tool_calls": 1,
        "retrievals": 1 if found else 0,
    }
    if found:
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["fallback_reason"] == "model_timeout" and "30 分钟" in body["output"]
        assert {k: body["usage"][k] for k in spent} == spent
    else:
        assert r.status_code == 504, r.text
    assert {k: row[k] for k in spent} == spent


def test_two_callers_turns_at_once_each_count_their_own_calls(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    # alice's model fails after a search (her extractive reply carries what she used); bob's
    # answers after a calculator call: both turns in flight at once (each first model call
    # waits for the other's), each tally and ledger row their own
    arrived: dict[str, asyncio.Event] = {"alice": asyncio.Event(), "bob": asyncio.Event()}

    async def turn(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        who = "alice" if "E-203" in messages[-1].text or "E-203" in messages[1].text else "bob"
        if messages[-1].role != "tool":
            arrived[who].set()
            other = arrived["bob" if who == "alice" else "alice"]
            await asyncio.wait_for(other.wait(), 10)
            if who == "alice":
                return reply(call("retrieve", '{"query": "E-203 冷却"}'), 300, 20)
            return reply(call("calculator", '{"expression": "6*7"}'), 40, 4)
        if who == "alice":
            raise ModelTimeoutError("the model took too long")
        return reply(Message.assistant("6 乘 7 等于 42。"), 50, 5)

    env = {
        "SHELFHAND_EMBEDDER": "hashing",
        "SHELFHAND_ANSWER_RETRIEVAL": "tool",
        "SHELFHAND_BUILTIN_TOOLS": "calculator",
    }
    app = App(
        settings=Settings.load(tmp_path, env=env),
        model=FunctionModel(turn),
        router=hashing_router(),
    )
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    thread_servers.append(server)

    def ask(headers: dict[str, str], question: str) -> tuple[dict[str, Any], dict[str, Any]]:
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            session = c.post("/v1/sessions").json()["id"]
            r = c.post(
                f"/v1/sessions/{session}/messages", json={"content": question, "stream": False}
            )
            assert r.status_code == 200, r.text
            return r.json(), c.get("/v1/usage").json()

    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        files = [("files", ("troubleshooting.md", DOC.encode()))]
        assert c.post("/v1/knowledge/files", files=files).status_code == 200
    with ThreadPoolExecutor(2) as pool:
        alice = pool.submit(ask, ALICE, "E-203 要冷却多久？")
        bob = pool.submit(ask, BOB, "6 乘 7 是多少？")
        (alice_reply, alice_report), (bob_reply, bob_report) = alice.result(), bob.result()

    counts = ("input_tokens", "output_tokens", "model_calls", "tool_calls", "retrievals")
    # alice's call past its timeout at its request's estimate, as her budget would charge it
    cut = alice_reply["usage"]["input_tokens"] - 300
    assert 300 < cut < 5000, cut
    alice_used = dict(zip(counts, (300 + cut, 20, 2, 1, 1), strict=True))
    bob_used = dict(zip(counts, (90, 9, 2, 1, 0), strict=True))
    assert alice_reply["fallback_reason"] == "model_timeout"
    assert {k: alice_reply["usage"][k] for k in counts} == alice_used
    assert bob_reply["output"] == "6 乘 7 等于 42。"
    assert {k: bob_reply["usage"][k] for k in counts} == bob_used
    (alice_row,) = alice_report["usage"]
    (bob_row,) = bob_report["usage"]
    assert {k: alice_row[k] for k in counts} == alice_used
    assert {k: bob_row[k] for k in counts} == bob_used
