"""Through the real service: one tenant's failing http_get target blocks nobody else (issue 11
point 2). The app's own toolkit and governance, with http_get allowed to reach 127.0.0.1 (as
the http_get tests do); a dead loopback port for tenant A, a live HTTP server for the others.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio.lowlevel
import httpx
import pytest
from service_helpers import ALICE, BOB, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import FunctionModel, tool_call
from shelfhand.tools.governance import Governance
from shelfhand.tools.toolkit import Toolkit


async def no_wait(seconds: float) -> None:
    await anyio.lowlevel.checkpoint()


class LoopbackApp(App):
    """The app, with its http_get allowed to fetch from loopback addresses and retry backoff
    that does not wait (the breaker counts attempts, not seconds)."""

    _test_governance: Governance | None = None

    def governance(self) -> Governance:
        if self._test_governance is None:
            self._test_governance = Governance(sleep=no_wait)
        return self._test_governance

    def toolkit(
        self,
        kb: Any,
        *,
        extra: Sequence[Any] = (),
        governed: bool = True,
        builtins: Sequence[str] | None = None,
    ) -> Toolkit:
        from shelfhand.agent.retrieve import make_retrieve_tool
        from shelfhand.tools.builtins import calculator, current_time, make_http_get

        tools = [make_retrieve_tool(kb), current_time, calculator]
        tools += [make_http_get(allow_private=True, timeout=5), *extra]
        return Toolkit(tools, governance=self.governance()) if governed else Toolkit(tools)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = "营业时间：9:00-18:00".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def healthy_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def fetch_then_report(messages: list[Message], tools: Any) -> Any:
    """Fetches the URL the user sent, then answers with what the tool said."""
    last = messages[-1]
    if last.role == "user":
        return tool_call("http_get", {"url": last.text.strip()})
    return "RESULT " + last.tool_results[0].content


def test_tenant_b_gets_through_while_tenant_a_s_target_is_failing(
    tmp_path: Path, thread_servers: list[ThreadServer], healthy_port: int
) -> None:
    with socket.socket() as s:  # a port nobody listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/status"
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}  # scripted calls
    settings = Settings.load(tmp_path, env=env)
    app = LoopbackApp(
        settings=settings,
        model=FunctionModel(fetch_then_report),
        router=EmbeddingRouter({"any": HashingEmbedder()}),
    )
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    thread_servers.append(server)

    def ask(headers: dict[str, str], url: str) -> str:
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
            session = c.post("/v1/sessions").json()["id"]
            r = c.post(f"/v1/sessions/{session}/messages", json={"content": url, "stream": False})
            assert r.status_code == 200, r.text
            output: str = r.json()["output"]
            return output

    answers = [ask(ALICE, dead) for _ in range(3)]
    assert "ConnectError" in answers[0]
    assert "circuit for 127.0.0.1" in answers[2] and "(tenant t1) open" in answers[2]

    healthy = f"http://127.0.0.1:{healthy_port}/hours"
    assert ask(BOB, healthy).startswith("RESULT HTTP 200 OK")  # another tenant
    assert "营业时间" in ask(ALICE, f"http://localhost:{healthy_port}/hours")  # A, another host
    b_dead = ask(BOB, dead)  # B is not blocked even on A's dead target: it is tried
    assert "ConnectError" in b_dead and "circuit" not in b_dead
