"""``allow_anonymous``: who a request is when the service runs without keys, or with keys and
anonymous callers let in. An OpenAI SDK always sends a key, so a keyless service takes any
key as the anonymous caller; a service with keys never takes an unknown key as anonymous."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from service_helpers import ThreadServer, start_thread_server, user_contexts, write
from test_openai_endpoint import retrieve_then_quote

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import FunctionModel

HELLO = [{"role": "user", "content": "投影仪保修多久？"}]


def serve(
    tmp_path: Path,
    servers: list[ThreadServer],
    keys: dict[str, UserContext],
    *,
    allow_anonymous: bool,
) -> ThreadServer:
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    app = App(
        settings=Settings.load(tmp_path / "ws", env=env),
        model=FunctionModel(retrieve_then_quote),
        router=EmbeddingRouter({"any": HashingEmbedder()}),
    )
    config = ServiceConfig(allow_anonymous=allow_anonymous)
    server = start_thread_server(create_app(app, config=config, api_keys=keys))
    servers.append(server)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.get("/readyz").status_code == 200  # the lifespan ran
    doc = write(
        tmp_path / "docs" / "warranty.md", "# 保修政策\n\n投影仪保修 24 个月，编号 DEF-1。\n"
    )
    server.service.kb.ingest([doc.parent], tenant_id="default")
    other = write(
        tmp_path / "t1" / "warranty.md", "# 保修政策\n\n投影仪保修 12 个月，编号 ALPHA-7。\n"
    )
    server.service.kb.ingest([other.parent], tenant_id="t1")
    return server


def sdk(server: ThreadServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def answer(server: ThreadServer, key: str) -> Any:
    return sdk(server, key).chat.completions.create(model="shelfhand", messages=HELLO)


def test_a_keyless_service_takes_any_key_as_the_anonymous_caller(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, thread_servers, {}, allow_anonymous=True)
    reply = answer(server, "sk-anything")  # the OpenAI SDK will not send none
    content = reply.choices[0].message.content or ""
    assert "DEF-1" in content and "ALPHA-7" not in content  # tenant default's documents
    with httpx.Client(base_url=server.url, timeout=30) as h:
        sessions = h.get("/v1/sessions", headers={"Authorization": "Bearer whatever"})
        assert sessions.status_code == 200
        assert h.get("/v1/sessions").status_code == 200  # and no key at all


def test_a2a_on_a_keyless_service_takes_any_key_too(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    pytest.importorskip("a2a", reason="the a2a extra is not installed")
    server = serve(tmp_path, thread_servers, {}, allow_anonymous=True)
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    with httpx.Client(base_url=server.url, timeout=30) as h:
        listed = h.post(
            "/a2a/shelfhand",
            json=body,
            headers={"A2A-Version": "1.0", "Authorization": "Bearer whatever"},
        )
    assert listed.status_code == 200 and "result" in listed.json()


def test_with_keys_an_unknown_key_is_still_refused(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, thread_servers, user_contexts(), allow_anonymous=True)
    with pytest.raises(openai.AuthenticationError) as refused:
        answer(server, "key-alicee")  # mistyped: not silently tenant default
    assert refused.value.code == "invalid_api_key"
    assert "ALPHA-7" in (answer(server, "key-alice").choices[0].message.content or "")
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    with httpx.Client(base_url=server.url, timeout=30) as h:
        assert h.get("/v1/sessions").status_code == 200  # no key: anonymous, as allowed
        unknown = h.get("/v1/sessions", headers={"Authorization": "Bearer key-alicee"})
        assert unknown.status_code == 401
        if _has_a2a():
            a2a = h.post(
                "/a2a/shelfhand",
                json=body,
                headers={"A2A-Version": "1.0", "Authorization": "Bearer key-alicee"},
            )
            assert a2a.status_code == 401


def test_without_allow_anonymous_a_keyless_service_refuses_every_key(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, thread_servers, {}, allow_anonymous=False)
    with pytest.raises(openai.AuthenticationError):
        answer(server, "sk-anything")
    with httpx.Client(base_url=server.url, timeout=30) as h:
        assert h.get("/v1/sessions").status_code == 401


def _has_a2a() -> bool:
    try:
        import a2a  # noqa: F401
    except ImportError:
        return False
    return True
