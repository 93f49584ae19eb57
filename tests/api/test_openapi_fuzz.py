"""Property-based requests from the published OpenAPI schema (schemathesis): no 5xx, ever.

The server is real (uvicorn on 127.0.0.1) with a cycling scripted model, a few documents, and
a valid API key on every generated request so the fuzzing reaches past authentication.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")

from hypothesis import HealthCheck, settings  # noqa: E402
from service_helpers import ALICE, ThreadServer, start_thread_server, user_contexts  # noqa: E402

from shelfhand.api import ServiceConfig, create_app  # noqa: E402
from shelfhand.app import App  # noqa: E402
from shelfhand.core.settings import Settings  # noqa: E402
from shelfhand.knowledge.embeddings.local import HashingEmbedder  # noqa: E402
from shelfhand.knowledge.embeddings.router import EmbeddingRouter  # noqa: E402
from shelfhand.testing import CyclingScriptModel, text, tool_call  # noqa: E402


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    workspace: Path = tmp_path_factory.mktemp("fuzz")
    model = CyclingScriptModel([tool_call("retrieve", {"query": "保修"}), text("答案 [1]。")])
    app = App(
        settings=Settings.load(workspace, env={}),
        model=model,
        router=EmbeddingRouter({"any": HashingEmbedder()}),
    )
    server = start_thread_server(
        create_app(app, config=ServiceConfig(max_file_bytes=64 * 1024), api_keys=user_contexts())
    )
    import httpx

    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        files = [("files", ("faq.md", "# FAQ\n\n保修 12 个月。Warranty is 12 months.\n".encode()))]
        assert c.post("/v1/knowledge/files", files=files).status_code == 200
    yield server
    server.stop()


@pytest.fixture(scope="module")
def api_schema(fuzz_server: ThreadServer) -> Any:
    return schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_generated_request_gets_a_server_error(case: Any, fuzz_server: ThreadServer) -> None:
    # generated cases may drop or garble the bearer header; always send a valid key so the
    # fuzzing reaches the handlers (401 itself is covered by test_serve)
    case.headers = {**(case.headers or {}), **ALICE}
    response = case.call(base_url=fuzz_server.url, timeout=30)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
