"""A fresh ``shelfhand mcp serve`` loads its embedders before it answers the MCP handshake, so
loading never counts against the first tool call's timeout (the official SDK client, stdio)."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mcp import Client, StdioServerParameters
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge.base import sample_corpus


class EmbeddingsServer:
    """A loopback ``/v1/embeddings`` that records every input it embeds."""

    def __init__(self) -> None:
        self.inputs: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                outer.inputs.extend(texts)
                data = [
                    {"object": "embedding", "index": i, "embedding": vector(t)}
                    for i, t in enumerate(texts)
                ]
                reply = {"object": "list", "data": data, "model": body["model"], "usage": None}
                raw = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def vector(text: str) -> list[float]:
    """Character-bigram hashing: texts sharing words get similar vectors (zh and en)."""
    out = [0.0] * 32
    for a, b in itertools.pairwise(text):
        out[int(hashlib.md5((a + b).encode()).hexdigest(), 16) % 32] += 1.0
    return out if any(out) else [1.0] + [0.0] * 31


@pytest.fixture
def embeddings() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer()
    yield server
    server.stop()


@pytest.mark.anyio
async def test_the_first_retrieve_of_a_fresh_mcp_serve_succeeds_after_a_warm_up(
    tmp_path: Path, embeddings: EmbeddingsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "SHELFHAND_EMBEDDER": "openai:fake-embed",
        "OPENAI_BASE_URL": embeddings.url,
        "OPENAI_API_KEY": "test",
    }
    for key, value in env.items():  # the embedder reads its endpoint from the environment
        monkeypatch.setenv(key, value)
    app = App(settings=Settings.load(tmp_path, env=env))
    with app.open_knowledge() as kb:
        kb.ingest([sample_corpus()])
    embeddings.inputs.clear()

    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "shelfhand.cli", "mcp", "serve", "-w", str(tmp_path)],
        env={**child_env, **env},
    )
    async with Client(params, read_timeout_seconds=60) as client:
        # the handshake answered only after the embedder was loaded and used once
        assert "warm up" in embeddings.inputs
        result = await client.call_tool("retrieve", {"query": "保修期多久？"})
    assert not result.is_error, result
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert "returns-policy" in text or "保修" in text
    assert "保修期多久？" in embeddings.inputs  # the query itself was embedded: hybrid search
