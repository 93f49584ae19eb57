"""A dependency that is down (PostgreSQL, Redis) is a 503 with its reason, never a 500."""

from __future__ import annotations

from pathlib import Path

import httpx
from service_helpers import ThreadServer, start_thread_server

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.core.settings import Settings


def test_a_dependency_error_is_answered_503_with_its_reason(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    settings = Settings.load(tmp_path, env={"SHELFHAND_RETRIEVAL_MODE": "keyword"})
    api = create_app(App(settings=settings, model=None), config=ServiceConfig(), api_keys={})
    down = {"yes": True}

    @api.get("/probe")
    def probe() -> dict[str, str]:
        if down["yes"]:
            raise DependencyUnavailableError(
                "PostgreSQL at postgresql://app:***@db/shelf is unreachable",
                dependency="postgresql",
            )
        return {"ok": "yes"}

    server = start_thread_server(api)
    thread_servers.append(server)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.get("/probe")
        assert r.status_code == 503
        assert r.json()["code"] == "postgresql_unavailable"
        assert "unreachable" in r.json()["detail"]
        assert r.headers["retry-after"] == "2"
        down["yes"] = False  # the dependency is back: the next request works
        assert c.get("/probe").json() == {"ok": "yes"}
