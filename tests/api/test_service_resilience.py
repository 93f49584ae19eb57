"""The service when its dependencies misbehave: a model that hangs, cuts its stream or sends
garbage (a raw loopback model server, the real provider and openai SDK), a client that goes
away, and a new workspace. Same app as ``shelfhand serve``, served by uvicorn in a thread."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from service_helpers import (
    ALICE,
    BOB,
    STARTED,
    ThreadServer,
    parse_sse,
    start_thread_server,
    user_contexts,
)

from shelfhand.api import ServiceConfig, create_app
from shelfhand.api.deps import hide_paths
from shelfhand.api.server import public_detail
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.providers.openai_chat import OpenAIChatModel
from support.misbehaving_chat_server import SLOW_WORDS, FakeModelServer


def serve(
    workspace: Path,
    model_server: FakeModelServer,
    servers: list[ThreadServer],
    *,
    model_timeout: float = 60.0,
    **config: Any,
) -> ThreadServer:
    # the model scripts the turn from its first request: no up-front retrieval before it
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    settings = Settings.load(workspace, env=env)
    model = OpenAIChatModel(
        "fake", base_url=model_server.url, api_key="k", max_retries=0, timeout=model_timeout
    )
    app = App(settings=settings, model=model, router=EmbeddingRouter({"any": HashingEmbedder()}))
    api = create_app(app, config=ServiceConfig(**config), api_keys=user_contexts())
    server = start_thread_server(api)
    servers.append(server)
    return server


def post_until_not_busy(c: httpx.Client, url: str, seconds: float) -> httpx.Response:
    """POST a message, retrying while the session answers 409, for at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        r = c.post(url, json={"content": "again", "stream": False})
        if r.status_code != 409 or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def test_a_hanging_model_gets_heartbeats_then_a_504_within_the_turn_timeout(
    tmp_path: Path, model_server: FakeModelServer, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, model_server, thread_servers, turn_timeout=1.5, heartbeat_interval=0.1)
    model_server.modes.extend(["hang", "hang"])
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        url = f"/v1/sessions/{session}/messages"
        r = c.post(url, json={"content": "hello", "stream": True})
        assert r.status_code == 200
        body = r.text
        assert body.startswith(": ping\n\n")  # bytes flow before the model says anything
        events = parse_sse("\n\n".join(b for b in body.split("\n\n") if not b.startswith(":")))
        assert events[-1]["type"] == "error" and events[-1]["status"] == 504
        assert events[-1]["code"] == "model_timeout" and "turn_timeout" in events[-1]["message"]
        r = c.post(url, json={"content": "hello", "stream": False})
        assert r.status_code == 504 and r.json()["code"] == "model_timeout"
        assert c.get(f"/v1/sessions/{session}").json()["state"] == "failed"
        ok = c.post(url, json={"content": "hello", "stream": False})  # the session is usable
        assert ok.status_code == 200 and ok.json()["output"] == "All good."


def test_a_client_that_disconnects_cancels_the_turn_and_frees_the_session(
    tmp_path: Path, model_server: FakeModelServer, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, model_server, thread_servers, heartbeat_interval=0.1)
    model_server.modes.append("hang")
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        url = f"/v1/sessions/{session}/messages"
        with c.stream("POST", url, json={"content": "hello", "stream": True}) as r:
            lines = r.iter_lines()
            deadline = time.monotonic() + 30
            while not model_server.hanging.is_set() and time.monotonic() < deadline:
                assert next(lines) in (": ping", "")  # heartbeats while the model is silent
            assert model_server.hanging.is_set()  # the turn waits on the model
        # the client went away: the model request is closed and the session is free
        assert model_server.closed_while_hanging.wait(30)
        follow_up = post_until_not_busy(c, url, 2.0)
        assert follow_up.status_code == 200, follow_up.text
        assert follow_up.json()["output"] == "All good."


def test_a_json_client_that_disconnects_cancels_the_turn_too(
    tmp_path: Path, model_server: FakeModelServer, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, model_server, thread_servers)
    model_server.modes.append("hang")
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        url = f"/v1/sessions/{session}/messages"
        body = json.dumps({"content": "hello", "stream": False}).encode()
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as raw:
            raw.sendall(
                f"POST {url} HTTP/1.1\r\nHost: {host}\r\n"
                f"Authorization: {ALICE['Authorization']}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert model_server.hanging.wait(30)  # the turn waits on the model
        # the client closed its connection: the model request is closed, the session free
        assert model_server.closed_while_hanging.wait(30)
        follow_up = post_until_not_busy(c, url, 2.0)
        assert follow_up.status_code == 200, follow_up.text


def test_malformed_json_from_the_model_is_a_502(
    tmp_path: Path, model_server: FakeModelServer, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, model_server, thread_servers)
    model_server.modes.extend(["garbage", "garbage"])
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        url = f"/v1/sessions/{session}/messages"
        for stream in (False, True):
            r = c.post(url, json={"content": "hello", "stream": stream})
            assert r.status_code == 502, r.text
            assert r.json()["code"] == "model_error"
            assert "malformed reply" in r.json()["detail"]


def test_a_stream_cut_mid_answer_ends_with_an_event_that_says_so(
    tmp_path: Path, model_server: FakeModelServer, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, model_server, thread_servers)
    model_server.modes.append("cut")
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "hi", "stream": True})
    events = parse_sse(r.text)
    assert events[0]["type"] == "text_delta" and "Hello" in events[0]["text"]
    error = events[-1]
    assert error["type"] == "error" and error["status"] == 502
    assert "stream was cut off" in error["message"]
    assert "could not connect" not in error["message"]


def test_docs_load_their_assets_from_this_server(
    tmp_path: Path, model_server: FakeModelServer, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, model_server, thread_servers)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for page in ("/docs", "/redoc"):
            html = c.get(page).text
            assets = re.findall(r'(?:src|href)="([^"]+)"', html)
            assert assets and all(a.startswith("/") for a in assets), assets  # no CDN
            for asset in assets:
                if asset != "/openapi.json":
                    r = c.get(asset)
                    assert r.status_code == 200 and len(r.content) > 1000, asset
        assert "/docs-assets/swagger-ui-bundle.js" in c.get("/docs").text


def test_error_bodies_name_files_relative_to_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    detail = f"{workspace.resolve()}/uploads/staging/abc/报告.pdf is not readable"
    assert public_detail(detail, workspace) == "uploads/staging/abc/报告.pdf is not readable"
    nested = public_detail([{"msg": f"in {workspace.resolve()}"}], workspace)
    assert nested == [{"msg": "in ."}]


def test_serve_on_a_new_folder_creates_the_workspace_and_comes_up(tmp_path: Path) -> None:
    workspace = tmp_path / "brand" / "new"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update({"SHELFHAND_EMBEDDER": "hashing", "PYTHONUNBUFFERED": "1"})
    command = [sys.executable, "-m", "shelfhand.cli", "serve", "-w", str(workspace)]
    process = subprocess.Popen(
        [*command, "--port", "0", "--allow-anonymous"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        url = None
        for line in process.stdout:  # ends if the server exits
            if found := STARTED.search(line):
                url = found.group(1)
                break
        assert url is not None, "shelfhand serve did not start"
        ready = httpx.get(f"{url}/readyz", timeout=30)
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert workspace.is_dir()
    finally:
        process.terminate()
        process.wait(timeout=30)


class RecordingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def embed_query(self, text: str) -> Any:
        self.queries.append(text)
        return super().embed_query(text)


def test_the_service_warms_up_its_embedders_before_it_reports_ready(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    embedder = RecordingEmbedder()
    settings = Settings.load(tmp_path, env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, router=EmbeddingRouter({"any": embedder}))
    server = start_thread_server(create_app(app, api_keys=user_contexts()))
    thread_servers.append(server)
    ready = httpx.get(f"{server.url}/readyz", timeout=30)
    assert ready.status_code == 200
    assert embedder.queries == ["warm up"]  # loaded before the first request was answered


def test_an_unreadable_upload_is_named_without_the_servers_folders(
    tmp_path: Path, model_server: FakeModelServer, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, model_server, thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
        files = [("files", ("损坏的手册.pdf", b"%PDF-1.4 not really a pdf"))]
        r = c.post("/v1/knowledge/files", files=files)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "损坏的手册.pdf" in detail
    assert str(tmp_path) not in detail and "staging" not in detail and "uploads/" not in detail
    assert (
        hide_paths("GET http://127.0.0.1:8080/v1/x failed")
        == "GET http://127.0.0.1:8080/v1/x failed"
    )


def test_a_caller_who_reads_a_streamed_answer_and_leaves_is_charged_what_was_streamed(
    tmp_path: Path, model_server: FakeModelServer, thread_servers: list[ThreadServer]
) -> None:
    """Two callers stream at once; alice reads a few words of her answer and disconnects,
    bob reads his to the end. Bob is charged what the provider reported; alice the request
    and the words written until she left, where before she was charged nothing (her call's
    reservation was released as if it had failed), so reading a streamed answer and leaving
    before its end spent none of a token budget."""
    (tmp_path / "shelfhand.toml").write_text(
        "[budgets.user]\ntokens_per_day = 1000000\n", encoding="utf-8"
    )
    server = serve(tmp_path, model_server, thread_servers)
    model_server.modes.extend(["slow", "slow"])

    def used(who: dict[str, str]) -> int:
        reply = httpx.get(f"{server.url}/v1/usage", headers=who, timeout=30).json()
        (mine,) = [b for b in reply["budgets"] if b["scope"].startswith("user ")]
        return int(mine["used"])

    def booked(who: dict[str, str]) -> int:
        """The tokens of the caller's turns in the usage ledger."""
        reply = httpx.get(f"{server.url}/v1/usage", headers=who, timeout=30).json()
        return sum(r["input_tokens"] + r["output_tokens"] for r in reply["usage"])

    def stream(who: dict[str, str], words: int | None) -> int:
        """Read the turn's stream (``words``: only that many text events); the words read."""
        read = 0
        with httpx.Client(base_url=server.url, headers=who, timeout=30) as c:
            session = c.post("/v1/sessions").json()["id"]
            body = {"content": "hello", "stream": True}
            with c.stream("POST", f"/v1/sessions/{session}/messages", json=body) as r:
                for line in r.iter_lines():
                    if (
                        line.startswith("data: ")
                        and json.loads(line[6:]).get("type") == "text_delta"
                    ):
                        read += 1
                        if read == words:
                            break  # the client goes away
        return read

    with ThreadPoolExecutor(2) as pool:
        alice = pool.submit(stream, ALICE, 5)
        bob = pool.submit(stream, BOB, None)
        assert alice.result() == 5 and bob.result() >= SLOW_WORDS
    assert used(BOB) == 50 + SLOW_WORDS  # as the provider reported
    deadline = time.monotonic() + 10
    while used(ALICE) == 0 and time.monotonic() < deadline:  # (once the server sees her go)
        time.sleep(0.05)
    charged = used(ALICE)
    assert 5 <= charged < 8192, charged  # the request and the words until she left
    # the usage ledger books her cancelled turn's cut call as her budget charged it (before:
    # a cancelled turn was not booked at all), and bob's as the provider reported it
    deadline = time.monotonic() + 10
    while booked(ALICE) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert booked(ALICE) == charged
    assert booked(BOB) == 50 + SLOW_WORDS


def test_a_call_past_the_models_timeout_is_booked_as_its_budget_charged_it(
    tmp_path: Path, model_server: FakeModelServer, thread_servers: list[ThreadServer]
) -> None:
    """The model's own deadline passes (not the caller leaving, not the turn's timeout): the
    budget charges the call its request, as the provider read it, and the usage ledger and
    the turn's failure book the same. Before, the budget charged the request and the ledger
    booked nothing, so ``GET /v1/usage`` disagreed with itself."""
    (tmp_path / "shelfhand.toml").write_text(
        "[budgets.user]\ntokens_per_day = 1000000\n", encoding="utf-8"
    )
    server = serve(tmp_path, model_server, thread_servers, model_timeout=0.5)
    model_server.modes.append("hang")
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "hello", "stream": False})
        assert r.status_code == 504 and r.json()["code"] == "model_timeout", r.text
        deadline = time.monotonic() + 10
        while True:
            usage = c.get("/v1/usage").json()
            (mine,) = [b for b in usage["budgets"] if b["scope"].startswith("user ")]
            booked = [
                (u["input_tokens"], u["output_tokens"], u["model_calls"]) for u in usage["usage"]
            ]
            if booked or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    charged = int(mine["used"])
    assert charged > 0  # the request, as the provider read it
    assert booked == [(charged, 0, 1)]
