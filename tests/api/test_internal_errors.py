"""An error nothing handles answers 500 with the request's trace id, in the body, in the
``X-Trace-Id`` header and in the log line that holds the traceback (Starlette's handler for
``Exception`` runs outside the trace-id middleware, where the id was already gone: the body
said "the trace id finds it in the logs" with an empty id, and the log line had none)."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from service_helpers import ALICE, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.api.server import _internal_error
from shelfhand.api.tracing import install_log_filter
from shelfhand.app import App
from shelfhand.core.settings import Settings


def test_an_unhandled_error_answers_500_with_the_request_s_trace_id(
    tmp_path: Path, thread_servers: list[ThreadServer], caplog: pytest.LogCaptureFixture
) -> None:
    app = App(settings=Settings.load(tmp_path / "ws", env={"SHELFHAND_RETRIEVAL_MODE": "keyword"}))
    api = create_app(app, config=ServiceConfig(), api_keys=user_contexts())

    def broken() -> None:
        raise RuntimeError("a bug, with a detail the caller must not see")

    api.add_api_route("/v1/broken", broken, methods=["GET"])
    server = start_thread_server(api)
    thread_servers.append(server)
    install_log_filter(logging.getLogger())
    with caplog.at_level(logging.ERROR, logger="shelfhand.api.server"):
        reply = httpx.get(
            f"{server.url}/v1/broken",
            headers={**ALICE, "X-Trace-Id": "trace-of-the-broken-call"},
            timeout=30,
        )

    assert reply.status_code == 500
    body = reply.json()
    assert body["code"] == "internal_error" and "a bug" not in reply.text
    assert body["trace_id"] == reply.headers["x-trace-id"] == "trace-of-the-broken-call"
    logged = [r for r in caplog.records if "unhandled error on GET /v1/broken" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert getattr(logged[0], "trace_id", None) == "trace-of-the-broken-call"


def test_an_unhandled_error_on_an_openai_route_has_openai_s_body() -> None:
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}

    reply = _internal_error(scope, RuntimeError("a bug"))

    assert reply.status_code == 500
    assert b'"code":"internal_error"' in reply.body and b'"type":"server_error"' in reply.body
