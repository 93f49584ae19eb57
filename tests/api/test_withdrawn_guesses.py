"""A streamed reply the agent loop drops as a guess (``tool`` mode: a fact stated with the
documents one search away and not searched) is withdrawn in every stream, and the answer
after the search follows it: the service's SSE says ``text_withdrawn`` with the exact text to
remove; the OpenAI-compatible streams, which can only append, say so in words.

Before, the web page showed the guess and the answer run together."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from service_helpers import ALICE, BOB, ThreadServer, parse_sse, start_thread_server, user_contexts

from shelfhand.agent.answer_check import WITHDRAWN_NOTICE_ZH
from shelfhand.agent.grounding import PASSAGES_INTRO
from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.testing import FunctionModel, failure, hashing_router, text

# each tenant's own warranty: a guess from one tenant's passages shows in the answer
DOCS = {
    "t1": "# 保修\n\n投影仪整机保修期为 12 个月，灯泡保修 3 个月。\n",
    "t2": "# 保修\n\n投影仪整机保修期为 24 个月，灯泡保修 6 个月。\n",
}
QUESTION = "投影仪的保修期是多久？"
GUESS = "投影仪的保修期为 99 年。"  # in no passage: the model guessed
NOTICE = WITHDRAWN_NOTICE_ZH  # the question is Chinese: so is what the stream says


def answer(messages: list[Message], tools: list[Any]) -> Any:
    """Guesses until it is shown passages, then quotes the first one, cited."""
    last = messages[-1].text
    if PASSAGES_INTRO not in last and not any(m.role == "tool" for m in messages):
        return text(GUESS)
    lines = last.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("[1] ") and i + 1 < len(lines):
            return text(f"{lines[i + 1]} [1]")
    return text("I could not find it.")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    root = tmp_path_factory.mktemp("withdrawn")
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    app = App(
        settings=Settings.load(root, env=env), model=FunctionModel(answer), router=hashing_router()
    )
    running = start_thread_server(create_app(app, api_keys=user_contexts()))
    for who, tenant in ((ALICE, "t1"), (BOB, "t2")):
        with httpx.Client(base_url=running.url, headers=who, timeout=30) as c:
            files = [("files", ("warranty.md", DOCS[tenant].encode()))]
            assert c.post("/v1/knowledge/files", files=files).status_code == 200
    yield running
    running.stop()


def sse_turn(server: ThreadServer, who: dict[str, str]) -> list[dict[str, Any]]:
    with httpx.Client(base_url=server.url, headers=who, timeout=60) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": QUESTION})
    assert r.status_code == 200, r.text
    return parse_sse(r.text)


def check_withdrawn(events: list[dict[str, Any]], months: str) -> None:
    kinds = [e["type"] for e in events]
    at = kinds.index("text_withdrawn")
    withdrawn, final = events[at], events[-1]
    before = "".join(e["text"] for e in events[:at] if e["type"] == "text_delta")
    after = "".join(e["text"] for e in events[at:] if e["type"] == "text_delta")
    # exactly what streamed is withdrawn, before the search; then the answer that counts
    assert withdrawn["text"] == before == GUESS and withdrawn["reason"] == "guessed"
    assert withdrawn["notice"].startswith(NOTICE)
    assert kinds.index("tool_started", at) > at and events[kinds.index("tool_started")]["name"]
    assert final["type"] == "final" and after == final["output"]
    assert f"{months} 个月" in final["output"] and "99" not in final["output"]
    assert kinds.count("text_withdrawn") == 1


def test_the_sse_stream_withdraws_the_guess_it_streamed(server: ThreadServer) -> None:
    check_withdrawn(sse_turn(server, ALICE), "12")


def test_two_tenants_at_once_each_withdraw_their_guess_and_get_their_own_answer(
    server: ThreadServer,
) -> None:
    streams: dict[str, list[dict[str, Any]]] = {}
    errors: list[BaseException] = []

    def run(name: str, who: dict[str, str]) -> None:
        try:
            streams[name] = sse_turn(server, who)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=a) for a in (("t1", ALICE), ("t2", BOB))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    check_withdrawn(streams["t1"], "12")
    check_withdrawn(streams["t2"], "24")


def test_the_openai_streams_say_the_draft_was_withdrawn_before_the_answer(
    server: ThreadServer,
) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="key-alice", max_retries=0)
    ask = [{"role": "user", "content": QUESTION}]
    chunks = list(client.chat.completions.create(model="shelfhand", messages=ask, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    shown, notice, rest = content.partition(NOTICE)
    assert notice and GUESS in shown and "99" not in rest and "12 个月" in rest

    events = list(client.responses.create(model="shelfhand", input=QUESTION, stream=True))
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response  # type: ignore[union-attr]
    assert streamed == done.output_text  # the deltas add up to the text, as clients expect
    shown, notice, rest = streamed.partition(NOTICE)
    assert notice and GUESS in shown and "99" not in rest and "12 个月" in rest

    # not streamed: nothing went out, so nothing is withdrawn
    whole = client.chat.completions.create(model="shelfhand", messages=ask)
    content = whole.choices[0].message.content or ""
    assert NOTICE not in content and "99" not in content and "12 个月" in content


def test_a_model_failing_after_its_withdrawn_guess_is_rescued_with_no_replaced_notice(
    tmp_path: Any, thread_servers: list[ThreadServer]
) -> None:
    # the guess was withdrawn, so nothing is shown when the model fails after the search:
    # the passages' answer is the answer, not one "replacing the answer above"
    def guess_then_fail(messages: list[Message], tools: list[Any]) -> Any:
        last = messages[-1].text
        if PASSAGES_INTRO not in last and not any(m.role == "tool" for m in messages):
            return text(GUESS)
        return failure("provider", "the endpoint went away")

    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    app = App(
        settings=Settings.load(tmp_path, env=env),
        model=FunctionModel(guess_then_fail),
        router=hashing_router(),
    )
    running = start_thread_server(create_app(app, api_keys=user_contexts()))
    thread_servers.append(running)
    with httpx.Client(base_url=running.url, headers=ALICE, timeout=30) as c:
        files = [("files", ("warranty.md", DOCS["t1"].encode()))]
        assert c.post("/v1/knowledge/files", files=files).status_code == 200

    events = sse_turn(running, ALICE)

    kinds = [e["type"] for e in events]
    assert "text_withdrawn" in kinds and "answer_replaced" not in kinds
    final = events[-1]
    assert final["type"] == "final" and "12 个月" in final["output"]
    assert final["fallback_reason"] and "99" not in final["output"]
