"""OpenAIEmbedder against a real HTTP server on 127.0.0.1 speaking ``/v1/embeddings``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from shelfhand.core.errors import (
    ConfigurationError,
    EmbeddingUnavailableError,
    KnowledgeError,
)
from shelfhand.knowledge.embeddings.router import Embedder
from shelfhand.providers.openai_embeddings import OpenAIEmbedder

DIM = 8


def _raw_vector(text: str) -> list[float]:
    """Deterministic, deliberately un-normalised vector for a text."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [float(b) - 100.0 for b in digest[:DIM]]


@dataclass
class FakeEmbeddingsServer:
    """Answers each POST from a script of (status, body) replies, then with real vectors."""

    script: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append(body)
        if self.script:
            return self.script.pop(0)
        inputs = body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": _raw_vector(t)}
            for i, t in enumerate(inputs)
        ]
        data.reverse()  # servers may answer out of order; ``index`` says where each goes
        return 200, {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }


@pytest.fixture
def server() -> Iterator[FakeEmbeddingsServer]:
    state = FakeEmbeddingsServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length).decode("utf-8"))
            assert self.path == "/v1/embeddings"
            status, payload = state.reply(body)
            raw = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                self.wfile.write(raw)  # (a client that refused the reply may have gone)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _embedder(server: FakeEmbeddingsServer, **kwargs: Any) -> OpenAIEmbedder:
    options: dict[str, Any] = {
        "base_url": server.url,
        "api_key": "test-key",
        "backoff": 0.0,
        "max_retries": 3,
    }
    options.update(kwargs)
    return OpenAIEmbedder("bge-m3", **options)


def _error(status: int, code: str | None = None) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": f"status {status}", "type": "x", "code": code}}


def test_vectors_come_back_normalised_in_input_order(server: FakeEmbeddingsServer) -> None:
    texts = ["hello world", "退货政策", "a third text"]
    vectors = _embedder(server, dim=DIM).embed(texts)
    assert vectors.shape == (3, DIM)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    expected = np.asarray(_raw_vector("退货政策"), dtype=np.float32)
    assert np.allclose(vectors[1], expected / np.linalg.norm(expected), atol=1e-6)
    assert server.requests[0]["model"] == "bge-m3"
    assert server.requests[0]["input"] == texts


def test_texts_are_sent_in_batches_of_batch_size(server: FakeEmbeddingsServer) -> None:
    vectors = _embedder(server, batch_size=2).embed([f"text {i}" for i in range(5)])
    assert vectors.shape == (5, DIM)
    assert [len(r["input"]) for r in server.requests] == [2, 2, 1]


def test_one_429_then_success_costs_exactly_one_retry(server: FakeEmbeddingsServer) -> None:
    server.script = [_error(429, "rate_limit_exceeded")]
    vector = _embedder(server).embed_query("hello")
    assert vector.shape == (DIM,)
    assert len(server.requests) == 2


def test_a_server_error_is_retried(server: FakeEmbeddingsServer) -> None:
    server.script = [_error(503), _error(500)]
    assert _embedder(server).embed(["x"]).shape == (1, DIM)
    assert len(server.requests) == 3


def test_a_400_is_never_retried(server: FakeEmbeddingsServer) -> None:
    server.script = [_error(400, "invalid_request_error")]
    with pytest.raises(KnowledgeError, match="rejected") as info:
        _embedder(server).embed(["too long"])
    assert not isinstance(info.value, EmbeddingUnavailableError)
    assert len(server.requests) == 1


def test_persistent_rate_limits_raise_embedding_unavailable(
    server: FakeEmbeddingsServer,
) -> None:
    server.script = [_error(429)] * 3
    with pytest.raises(EmbeddingUnavailableError, match="after 3 attempts"):
        _embedder(server, max_retries=2).embed(["x"])
    assert len(server.requests) == 3


def test_exhausted_quota_raises_embedding_unavailable_without_retrying(
    server: FakeEmbeddingsServer,
) -> None:
    server.script = [_error(429, "insufficient_quota")]
    with pytest.raises(EmbeddingUnavailableError, match="quota"):
        _embedder(server).embed(["x"])
    assert len(server.requests) == 1


def test_a_refused_key_is_a_configuration_error(server: FakeEmbeddingsServer) -> None:
    server.script = [_error(401, "invalid_api_key")]
    with pytest.raises(ConfigurationError, match="refused the key"):
        _embedder(server).embed(["x"])
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"object": "list", "data": None},  # not a list
        {"object": "list", "data": [{"index": 0, "embedding": "AAAA"}]},  # base64, not asked
        {"error": "no such route"},  # not an embeddings API
    ],
    ids=["no-data", "not-floats", "other-api"],
)
def test_a_reply_that_is_not_the_embeddings_asked_for_is_a_clear_error(
    server: FakeEmbeddingsServer, body: dict[str, Any]
) -> None:
    server.script = [(200, body)]
    with pytest.raises(KnowledgeError, match="did not answer with 1 embeddings"):
        _embedder(server).embed(["x"])
    assert len(server.requests) == 1  # (not retried: asking again gets the same)


def test_a_reply_with_fewer_vectors_than_texts_is_an_error(server: FakeEmbeddingsServer) -> None:
    server.script = [(200, {"data": [{"index": 0, "embedding": _raw_vector("a")}]})]
    with pytest.raises(KnowledgeError, match="did not answer with 2 embeddings"):
        _embedder(server).embed(["a", "b"])


def test_an_unreachable_server_raises_embedding_unavailable_after_retries() -> None:
    # Bind then close a port so nothing listens there.
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = probe.server_address[1]
    probe.server_close()
    embedder = OpenAIEmbedder(
        "m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0.0, timeout=2.0
    )
    with pytest.raises(EmbeddingUnavailableError, match="after 2 attempts"):
        embedder.embed(["x"])


def test_a_server_that_never_answers_is_given_up_after_two_timeouts_not_every_retry() -> None:
    """A hung server (it accepts and answers nothing) costs two timeouts, however many
    retries a 5xx would get: each more attempt would wait the whole timeout again."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    embedder = OpenAIEmbedder(
        "m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=5, backoff=0.0, timeout=0.3
    )
    try:
        with pytest.raises(EmbeddingUnavailableError, match="after 2 attempts: Request timed out"):
            embedder.embed(["x"])
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        listener.close()
    assert len(accepted) == 2


def test_failures_name_the_endpoint_from_openai_base_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    url = f"http://127.0.0.1:{probe.server_address[1]}/v1"
    probe.server_close()
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a self-hosted server needs none
    embedder = OpenAIEmbedder("m", max_retries=0, backoff=0.0, timeout=2.0)
    with pytest.raises(EmbeddingUnavailableError) as info:
        embedder.embed(["x"])
    assert url in str(info.value) and "api.openai.com" not in str(info.value)


def test_dim_is_learned_from_the_first_response(server: FakeEmbeddingsServer) -> None:
    embedder = _embedder(server)
    assert embedder.dim == DIM
    assert len(server.requests) == 1
    assert embedder.name == "openai:bge-m3"


def test_a_dimension_other_than_configured_is_a_configuration_error(
    server: FakeEmbeddingsServer,
) -> None:
    with pytest.raises(ConfigurationError, match="configured dim is 1024"):
        _embedder(server, dim=1024).embed(["x"])


def test_request_dimensions_sends_the_dimensions_field(server: FakeEmbeddingsServer) -> None:
    embedder = _embedder(server, dim=DIM, request_dimensions=True)
    embedder.embed(["x"])
    assert server.requests[0]["dimensions"] == DIM
    assert embedder.name == f"openai:bge-m3:{DIM}"


def test_blank_texts_are_sent_as_a_space(server: FakeEmbeddingsServer) -> None:
    _embedder(server).embed(["", "ok"])
    assert server.requests[0]["input"] == [" ", "ok"]


def test_openai_without_a_key_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIEmbedder("text-embedding-3-small")


def test_openai_embedder_satisfies_the_embedder_protocol(server: FakeEmbeddingsServer) -> None:
    assert isinstance(_embedder(server), Embedder)


def test_a_reply_longer_than_any_batch_of_vectors_is_refused_not_retried(
    server: FakeEmbeddingsServer,
) -> None:
    # bound: 2 vectors of 8 floats as JSON, plus 16 MiB of room
    server.script.append((200, {"data": [], "padding": "x" * (17 * 1024**2)}))
    embedder = OpenAIEmbedder("m", dim=DIM, base_url=server.url, api_key="k", batch_size=2)
    with pytest.raises(KnowledgeError, match="sent a reply longer than"):
        embedder.embed(["a", "b"])
    assert len(server.requests) == 1
