"""A service on the PostgreSQL knowledge store answers 503 while PostgreSQL is down, and
searches again once it is back (never from a local copy)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import httpx
from service_helpers import ALICE, ThreadServer, pg_keyword_settings, serve_without_model

from shelfhand.app import App
from shelfhand.dev.services import LocalPostgres
from shelfhand.knowledge.types import Document, Section


def test_the_service_answers_503_while_postgresql_is_down_then_200_again(
    tmp_path: Path, pg_url: str, pg_server: LocalPostgres, thread_servers: list[ThreadServer]
) -> None:
    settings = pg_keyword_settings(tmp_path, pg_url)
    text = "投影仪保修期为12个月。The projector warranty lasts twelve months."
    with App(settings=settings).open_knowledge() as kb:
        kb.ingest_documents(
            [
                Document(
                    doc_id="warranty.md",
                    source="warranty.md",
                    title="Warranty",
                    doc_type="markdown",
                    sections=(Section(text=text),),
                    content_hash=hashlib.sha256(text.encode()).hexdigest(),
                    tenant_id="t1",  # alice's
                )
            ]
        )
    server = serve_without_model(settings, thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
        found = c.get("/v1/knowledge/search", params={"q": "保修期"})
        assert found.status_code == 200
        assert found.json()["results"][0]["source"] == "warranty.md"
        pg_server.stop()
        try:
            down = c.get("/v1/knowledge/search", params={"q": "保修期"})
            assert down.status_code == 503
            assert down.json()["code"] == "postgresql_unavailable"
            assert "PostgreSQL" in down.json()["detail"] and down.headers["retry-after"]
        finally:
            pg_server.start()
        deadline = time.monotonic() + 30
        back = c.get("/v1/knowledge/search", params={"q": "warranty"})
        while back.status_code == 503 and time.monotonic() < deadline:  # pragma: no cover
            time.sleep(0.5)
            back = c.get("/v1/knowledge/search", params={"q": "warranty"})
        assert back.status_code == 200
        assert back.json()["results"][0]["source"] == "warranty.md"
