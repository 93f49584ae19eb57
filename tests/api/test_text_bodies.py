"""JSON bodies the service refuses before a route runs. One over 32 MiB: 413, before it is
read whole. One holding half of a surrogate pair alone ("\\ud800"): bad input, which each
route answers as its own (OpenAI's 400, shelfhand's 422, A2A's parse error), storing
nothing; it answered 500 ("surrogates not allowed") on the OpenAI-compatible routes and an
internal error on A2A. A real server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from service_helpers import ThreadServer, send_until_answered, start_thread_server

from shelfhand.api import ServiceConfig, create_app
from shelfhand.api.text_bodies import MAX_JSON_BYTES, lone_surrogate
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter

KEY = {"Authorization": "Bearer k1", "Content-Type": "application/json"}
LONE = '"\\ud800 E-203 \\u662f\\u4ec0\\u4e48"'  # as JSON text: a high surrogate alone


@pytest.fixture
def server(tmp_path: Path, thread_servers: list[ThreadServer]) -> ThreadServer:
    env = {"SHELFHAND_EMBEDDER": "hashing"}
    app = App(
        settings=Settings.load(tmp_path / "ws", env=env),
        router=EmbeddingRouter({"any": HashingEmbedder()}),
    )
    keys = {"k1": UserContext(tenant_id="default", user_id="u1", roles=["user"])}
    started = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=keys))
    thread_servers.append(started)
    with httpx.Client(base_url=started.url, timeout=30) as c:
        assert c.get("/readyz").status_code == 200
    return started


def post(server: ThreadServer, path: str, body: str) -> httpx.Response:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        return c.post(path, content=body.encode(), headers=KEY)


def sessions(server: ThreadServer) -> list[object]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        listed = c.get("/v1/sessions", headers=KEY).json()
    return list(listed["sessions"] if isinstance(listed, dict) else listed)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", f'{{"model": "shelfhand", "messages": [{{"role": "user", "content": {LONE}}}]}}'),
        ("/v1/responses", f'{{"model": "shelfhand", "input": {LONE}}}'),
    ],
)  # fmt: skip
def test_the_openai_routes_answer_400_in_openais_body_and_store_nothing(
    server: ThreadServer, path: str, body: str
) -> None:
    reply = post(server, path, body)

    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_input"
    assert "surrogate" in error["message"] and "\\ud800" in error["message"]
    assert sessions(server) == []  # no session was opened for the turn


def test_shelfhands_own_routes_answer_422(server: ThreadServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        created = c.post("/v1/sessions", json={"title": "ok"}, headers=KEY)
    assert created.status_code == 201
    session = created.json()["id"]

    reply = post(server, f"/v1/sessions/{session}/messages", f'{{"content": {LONE}}}')

    assert reply.status_code == 422, reply.text
    assert reply.json()["code"] == "invalid_input"
    assert "surrogate" in reply.json()["detail"][0]["msg"]


def test_a2a_answers_a_json_rpc_parse_error(server: ThreadServer) -> None:
    pytest.importorskip("a2a", reason="the a2a extra is not installed")
    message = {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "X"}]}
    request = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}

    reply = post(server, "/a2a/shelfhand", json.dumps(request).replace('"X"', LONE))

    error = reply.json()["error"]
    assert error["code"] == -32700 and "surrogate" in error["message"]


def test_a2a_answers_a_parse_error_for_an_integer_too_long_to_read(server: ThreadServer) -> None:
    # json.loads refuses an integer over 4,300 digits; the SDK answered an internal error
    pytest.importorskip("a2a", reason="the a2a extra is not installed")
    message = {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "X"}]}
    request = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    body = json.dumps({**request, "n": 0}).replace('"n": 0', '"n": ' + "9" * 5000)

    reply = post(server, "/a2a/shelfhand", body)

    error = reply.json()["error"]
    assert error["code"] == -32700 and "4300 digits" in error["message"], error
    # digits inside a string are text
    quoted = post(server, "/a2a/shelfhand", json.dumps({**request, "n": "9" * 5000}))
    assert quoted.json().get("error", {}).get("code") != -32700


def test_a_surrogate_pair_is_text_and_answers(server: ThreadServer) -> None:
    # an emoji as json.dumps writes it by default: two escapes, one character
    body = json.dumps(
        {"model": "shelfhand", "messages": [{"role": "user", "content": "😀 E-203?"}]}
    )
    assert "\\ud83d\\ude00" in body

    reply = post(server, "/v1/chat/completions", body)

    assert reply.status_code == 200, reply.text


@given(st.text(max_size=40), st.sampled_from(["\ud800", "\udfff", "\udbff", "\udc00"]))
@settings(max_examples=200)
def test_lone_surrogate_finds_every_half_pair_and_passes_all_text(text: str, half: str) -> None:
    clean = "".join(c for c in text if not 0xD800 <= ord(c) <= 0xDFFF)
    assert lone_surrogate(json.dumps({"a": [clean], clean: 1}).encode()) == ""
    assert lone_surrogate(json.dumps({"a": [clean], clean: 1}, ensure_ascii=False).encode()) == ""
    assert lone_surrogate(json.dumps({"a": [clean + half]}).encode())
    assert lone_surrogate(json.dumps({clean + half: 1}).encode())
    # an escaped backslash before "ud800" is six characters of text
    assert lone_surrogate(b'{"a": "\\\\ud800"}') == ""


def test_a_body_over_the_limit_is_refused_413_before_it_is_read_whole(
    server: ThreadServer,
) -> None:
    # a 300 MB body grew the server by 1.5 GB and 10 s of CPU before its 400
    content = "E-203 " * (MAX_JSON_BYTES // 6 + 10)
    body = json.dumps({"model": "shelfhand", "messages": [{"role": "user", "content": content}]})
    reply = post(server, "/v1/chat/completions", body)
    assert reply.status_code == 413
    assert reply.json()["error"]["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no length said up front
        for _ in range(MAX_JSON_BYTES // 1024**2 + 2):
            yield b" " * 1024**2

    with httpx.Client(base_url=server.url, timeout=60) as c:
        chunked = c.post("/v1/sessions", content=chunks(), headers=KEY)
    assert chunked.status_code == 413 and chunked.json()["code"] == "body_too_large"
    assert sessions(server) == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream"])
def test_a_body_of_any_content_type_is_counted_as_it_arrives(
    server: ThreadServer, content_type: str
) -> None:
    # a text/plain body was read whole before its 422: 800 MB grew the server by 1.5 GB
    headers = {"Content-Type": content_type, "Authorization": "Bearer k1"}
    most = 4 * MAX_JSON_BYTES // 1024**2
    answer, sent = send_until_answered(server, "/v1/chat/completions", headers, most)

    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"body_too_large"' in answer and b"32 MiB" in answer
    assert sent < most  # it stopped reading at the limit
    with httpx.Client(base_url=server.url, timeout=30) as c:  # and serves on
        declared = c.post(
            "/v1/sessions",
            content=b"a" * (MAX_JSON_BYTES + 1),
            headers={"Content-Type": content_type, "Authorization": "Bearer k1"},
        )
        assert declared.status_code == 413 and declared.json()["code"] == "body_too_large"
        assert c.get("/readyz").status_code == 200
